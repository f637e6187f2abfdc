//! [`Every`]: several servers driven as one by the fault cases.

use std::sync::Arc;

use async_trait::async_trait;
use distlock_conformance::ServerControl;
use distlock_core::BoxError;
use futures_util::future::{join_all, BoxFuture};

/// Several servers as one, for fault cases and fault schedules: each call goes to
/// every server at once and succeeds when it succeeds on each (a Redlock's masters,
/// a cluster's members, or any subset of them, such as a minority of masters).
#[derive(Debug)]
pub struct Every(Vec<Arc<dyn ServerControl>>);

impl Every {
    /// The servers `members`, as one.
    pub fn new<C: ServerControl + 'static>(members: impl IntoIterator<Item = Arc<C>>) -> Self {
        Every(
            members
                .into_iter()
                .map(|m| -> Arc<dyn ServerControl> { m })
                .collect(),
        )
    }

    /// How many servers it reaches.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it reaches no server.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    async fn each<'a, F>(&'a self, op: F) -> Result<(), BoxError>
    where
        F: Fn(&'a Arc<dyn ServerControl>) -> BoxFuture<'a, Result<(), BoxError>>,
    {
        join_all(self.0.iter().map(op)).await.into_iter().collect()
    }
}

#[async_trait]
impl ServerControl for Every {
    async fn pause(&self) -> Result<(), BoxError> {
        self.each(|m| m.pause()).await
    }
    async fn unpause(&self) -> Result<(), BoxError> {
        self.each(|m| m.unpause()).await
    }
    async fn restart(&self) -> Result<(), BoxError> {
        self.each(|m| m.restart()).await
    }
    async fn kill(&self) -> Result<(), BoxError> {
        self.each(|m| m.kill()).await
    }
    async fn start(&self) -> Result<(), BoxError> {
        self.each(|m| m.start()).await
    }
    async fn stop(&self) -> Result<(), BoxError> {
        self.each(|m| m.stop()).await
    }
    fn can_kill_connections(&self) -> bool {
        self.0.iter().all(|m| m.can_kill_connections())
    }
    async fn kill_connections(&self) -> Result<(), BoxError> {
        self.each(|m| m.kill_connections()).await
    }
    async fn kill_connections_counted(&self) -> Result<Option<usize>, BoxError> {
        let counts = join_all(self.0.iter().map(|m| m.kill_connections_counted())).await;
        let mut total = Some(0);
        for count in counts {
            total = match (total, count?) {
                (Some(t), Some(c)) => Some(t + c),
                _ => None,
            };
        }
        Ok(total)
    }
    async fn ready(&self) -> Result<(), BoxError> {
        self.each(|m| m.ready()).await
    }
}
