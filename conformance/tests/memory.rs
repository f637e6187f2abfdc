//! The whole conformance suite on the memory backend, with its simulated server
//! faults: exactly how a third party runs the suite on its own backend.

conformance::conformance_main!(async {
    Ok::<_, std::convert::Infallible>(conformance::Target::memory())
});
