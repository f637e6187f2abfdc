//! What the failover tests share.

use std::time::Duration;

use tokio::time::{sleep, Instant};

/// Retries `op` while it fails retryably or hangs (each try cut off after 10 s), for
/// up to a minute: through a failover. A non-retryable error, or a minute gone, fails
/// the test, naming `what`.
pub(crate) async fn until_served<T, F, Fut>(what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = distlock_core::Result<T>>,
{
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        match tokio::time::timeout(Duration::from_secs(10), op()).await {
            Ok(Ok(value)) => return value,
            Ok(Err(e)) if e.is_retryable() && Instant::now() < give_up => {}
            Ok(Err(e)) => panic!("{what}: {e}"),
            Err(_) if Instant::now() < give_up => {}
            Err(_) => panic!("{what} hung past the failover"),
        }
        sleep(Duration::from_millis(250)).await;
    }
}
