//! The Lua scripts, one per operation: their sources (the `.lua` files beside this
//! one) and how each is called (by hash, and sent whole where the server forgot it).

use redis::{Script, ServerErrorKind};

/// A Lua script: called by its hash, and sent whole where the server has forgotten it.
#[derive(Debug, Clone)]
pub(crate) struct Lua {
    pub(crate) script: Script,
    pub(crate) source: &'static str,
}

impl Lua {
    pub(crate) fn new(source: &'static str) -> Self {
        Lua {
            script: Script::new(source),
            source,
        }
    }
}

pub(crate) struct Scripts {
    pub(crate) acquire: Lua,
    pub(crate) release: Lua,
    pub(crate) release_plain: Lua,
    pub(crate) extend: Lua,
    pub(crate) inspect: Lua,
    pub(crate) force_release: Lua,
    pub(crate) commit: Lua,
    pub(crate) queued: Lua,
    pub(crate) leave: Lua,
    pub(crate) permits_acquire: Lua,
    pub(crate) permits_release: Lua,
    pub(crate) permits_extend: Lua,
    pub(crate) permits_leave: Lua,
    pub(crate) permits_holders: Lua,
    pub(crate) acquire_all: Lua,
    pub(crate) permits_proclaim: Lua,
    pub(crate) mark: Lua,
}

/// Every script's source, in the order of [`Scripts`]'s fields. The fair step is the
/// queue's part, then the plain acquire's, in one script; release and leave each start
/// with the handoff's function, which they share.
pub(crate) const SOURCES: [&str; 17] = [
    include_str!("scripts/acquire.lua"),
    concat!(
        include_str!("scripts/handoff.lua"),
        include_str!("scripts/release.lua")
    ),
    include_str!("scripts/release_plain.lua"),
    include_str!("scripts/extend.lua"),
    include_str!("scripts/inspect.lua"),
    include_str!("scripts/force_release.lua"),
    include_str!("scripts/commit.lua"),
    concat!(
        include_str!("scripts/queue.lua"),
        include_str!("scripts/acquire.lua")
    ),
    concat!(
        include_str!("scripts/handoff.lua"),
        include_str!("scripts/leave.lua")
    ),
    include_str!("scripts/permits_acquire.lua"),
    include_str!("scripts/permits_release.lua"),
    include_str!("scripts/permits_extend.lua"),
    include_str!("scripts/permits_leave.lua"),
    include_str!("scripts/permits_holders.lua"),
    include_str!("scripts/acquire_all.lua"),
    include_str!("scripts/permits_proclaim.lua"),
    include_str!("scripts/mark.lua"),
];

impl Scripts {
    pub(crate) fn new() -> Self {
        let [acquire, release, release_plain, extend, inspect, force_release, commit, queued, leave, permits_acquire, permits_release, permits_extend, permits_leave, permits_holders, acquire_all, permits_proclaim, mark] =
            SOURCES.map(Lua::new);
        Scripts {
            acquire,
            release,
            release_plain,
            extend,
            inspect,
            force_release,
            commit,
            queued,
            leave,
            permits_acquire,
            permits_release,
            permits_extend,
            permits_leave,
            permits_holders,
            acquire_all,
            permits_proclaim,
            mark,
        }
    }
}

/// Whether the server said it has forgotten the script (`NOSCRIPT`).
pub(crate) fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript)
        || e.to_string().contains("NOSCRIPT")
}
