//! The fenced-store suite on core's in-memory reference store.

distlock_conformance::fenced_conformance_main!(async {
    Ok::<_, std::convert::Infallible>(distlock_conformance::fenced::StoreTarget::memory())
});
