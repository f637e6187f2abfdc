//! The whole conformance suite on the memory backend, with its simulated server
//! faults: exactly how a third party runs the suite on its own backend.

distlock_conformance::conformance_main!(async {
    Ok::<_, std::convert::Infallible>(distlock_conformance::Target::memory())
});
