//! The guides: what the API pages do not say in one place. The same text as the
//! repository's `distlock/guides/*.md`, made into pages here when the crate builds.

pub mod locks {
    #![doc = include_str!(concat!(env!("OUT_DIR"), "/locks.md"))]
}

pub mod fencing {
    #![doc = include_str!(concat!(env!("OUT_DIR"), "/fencing.md"))]
}

pub mod configuration {
    #![doc = include_str!(concat!(env!("OUT_DIR"), "/configuration.md"))]
}

pub mod operating {
    #![doc = include_str!(concat!(env!("OUT_DIR"), "/operating.md"))]
}

pub mod backends {
    #![doc = include_str!(concat!(env!("OUT_DIR"), "/backends.md"))]
}

pub mod benchmarks {
    #![doc = include_str!(concat!(env!("OUT_DIR"), "/benchmarks.md"))]
}
