//! The fenced-store suite on core's file store, in a fresh directory under Cargo's
//! temporary directory for tests. Each concurrent writer has a `FileStore` of its own,
//! so that the file locks, not one value in memory, keep the steps apart.

use std::path::PathBuf;
use std::sync::Arc;

use distlock_conformance::fenced::StoreTarget;
use distlock_core::{DynFencedStore, FileStore};

distlock_conformance::fenced_conformance_main!(async {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("file-store-{:016x}", rand::random::<u64>()));
    let first: Arc<DynFencedStore> = Arc::new(FileStore::new(&dir));
    Ok::<_, std::convert::Infallible>(StoreTarget::new(first).with_clients(move || {
        let store: Arc<DynFencedStore> = Arc::new(FileStore::new(&dir));
        Box::pin(async move { Ok(store) })
    }))
});
