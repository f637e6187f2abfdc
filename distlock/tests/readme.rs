//! The README's Redis quick start (the repository's and the facade's crates.io page) is
//! `tests/readme/redis.rs`, the facade's README is the repository's whole, and the
//! fencing guide's
//! is `tests/readme/quick_start.rs`, each word for word, and each runs (the first
//! against a real Redis).

#[cfg(feature = "redis")]
mod redis_quick_start {
    include!("readme/redis.rs");

    #[test]
    fn the_readme_redis_quick_start_runs_on_a_real_redis() {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let server = runtime
            .block_on(distlock_testservers::ServerHandle::start(
                &distlock_testservers::Redis,
            ))
            .unwrap_or_else(|e| panic!("{e}"));
        // The quick start reads its server's URL as a service would, from REDIS_URL.
        std::env::set_var("REDIS_URL", server.url());
        let ran = main();
        // The container is removed from within the runtime that started it.
        runtime.block_on(async move { drop(server) });
        ran.expect("the quick start runs");
    }
}

/// `file`'s text from its second line on (the first says where it is shown).
fn body(file: &str) -> &str {
    file.split_once('\n').map(|(_, rest)| rest).unwrap_or(file)
}

/// The notice at the top of the facade's README.
const FACADE_NOTICE: &str =
    "<!-- The crates.io page of the `distlock` crate: the repository's README.md, its links\n\
to the guides made links to their pages on docs.rs and its other links into the\n\
repository written out as paths in it. Made by tests/readme.rs; to make it again, run\n\
that test with DISTLOCK_WRITE_README=1. -->\n\n";

/// Where docs.rs shows the guides (`distlock::guides`), which the facade's build makes
/// from `distlock/guides/*.md`.
const GUIDES_ON_DOCS_RS: &str = "https://docs.rs/distlock/latest/distlock/guides/";

/// The facade's README made from the repository's: the same text whole, each link to a
/// guide made a link to its page on docs.rs, and each link to another file of the
/// repository (which crates.io cannot follow) written out as its path there.
fn facade_readme(repository: &str) -> String {
    let mut out = String::from(FACADE_NOTICE);
    let mut rest = repository;
    while let Some(open) = rest.find('[') {
        let (before, from) = rest.split_at(open);
        out.push_str(before);
        let link = from.find("](").and_then(|mid| {
            let end = mid + from[mid..].find(')')?;
            Some((&from[1..mid], &from[mid + 2..end], end))
        });
        match link {
            Some((text, target, end))
                if !text.contains('[')
                    && !target.starts_with("http")
                    && !target.starts_with('#') =>
            {
                let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
                let guide = path
                    .strip_prefix("distlock/guides/")
                    .and_then(|file| file.strip_suffix(".md"));
                if let Some(guide) = guide {
                    let fragment = if fragment.is_empty() {
                        String::new()
                    } else {
                        format!("#{fragment}")
                    };
                    out.push_str(&format!(
                        "[{text}]({GUIDES_ON_DOCS_RS}{guide}/index.html{fragment})"
                    ));
                } else if text.trim_matches('`') == path {
                    out.push_str(&format!("`{path}`"));
                } else {
                    out.push_str(&format!("{text} in `{path}`"));
                }
                rest = &from[end + 1..];
            }
            _ => {
                out.push('[');
                rest = &from[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn the_facade_readme_is_the_repository_readme() {
    let made = facade_readme(include_str!("../../README.md"));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    if std::env::var_os("DISTLOCK_WRITE_README").is_some() {
        std::fs::write(path, &made).expect("write distlock/README.md");
    }
    let shown = std::fs::read_to_string(path).expect("read distlock/README.md");
    assert!(
        shown == made,
        "distlock/README.md is not the repository's README.md as crates.io shows it: \
         run this test with DISTLOCK_WRITE_README=1 to make it again"
    );
}

#[test]
fn a_link_into_the_repository_becomes_its_path_and_a_guide_its_page_on_docs_rs() {
    let made = facade_readme(
        "see [fencing](distlock/guides/fencing.md#a), [locks](distlock/guides/locks.md), \
         [the example](distlock/examples/service.rs), [docs.rs](https://docs.rs/x), \
         [here](#b) and a [b]",
    );
    assert_eq!(
        made.strip_prefix(FACADE_NOTICE),
        Some(
            "see [fencing](https://docs.rs/distlock/latest/distlock/guides/fencing/index.html#a), \
             [locks](https://docs.rs/distlock/latest/distlock/guides/locks/index.html), \
             the example in `distlock/examples/service.rs`, [docs.rs](https://docs.rs/x), \
             [here](#b) and a [b]"
        )
    );
}

#[test]
fn the_readme_shows_the_redis_quick_start() {
    assert!(
        include_str!("../../README.md").contains(body(include_str!("readme/redis.rs"))),
        "README.md's quick start differs from tests/readme/redis.rs"
    );
    // The facade's own README, its crates.io page, shows the same.
    assert!(
        include_str!("../README.md").contains(body(include_str!("readme/redis.rs"))),
        "distlock/README.md's quick start differs from tests/readme/redis.rs"
    );
}

mod quick_start {
    include!("readme/quick_start.rs");

    #[test]
    fn the_readme_quick_start_runs() {
        main().expect("the quick start runs");
    }
}

#[test]
fn the_fencing_guide_shows_its_quick_start() {
    assert!(
        include_str!("../../distlock/guides/fencing.md")
            .contains(body(include_str!("readme/quick_start.rs"))),
        "distlock/guides/fencing.md's quick start differs from tests/readme/quick_start.rs"
    );
}
