//! The whole conformance suite on the memory backend as an efficiency lock's client
//! asks it (`Target::unfenced`): its fence costs nothing extra, so it mints one
//! anyway, and every case runs and passes as on the fenced lock, the fencing cases
//! included.

distlock_conformance::conformance_main!(async {
    Ok::<_, std::convert::Infallible>(distlock_conformance::Target::memory().unfenced())
});
