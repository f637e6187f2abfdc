//! The README's three ways to configure a backend compile (they are
//! `tests/readme/configure.rs`, built here), and the README shows them word for word.

mod configure {
    include!("readme/configure.rs");
}

/// The blocks of `source` between `// begin: NAME` and `// end`, without the marker
/// lines, each line's indentation of four spaces removed.
fn blocks(source: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut current: Option<(String, Vec<&str>)> = None;
    for line in source.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("// begin: ") {
            current = Some((name.to_owned(), Vec::new()));
        } else if trimmed == "// end" {
            if let Some((name, lines)) = current.take() {
                found.push((name, lines.join("\n")));
            }
        } else if let Some((_, lines)) = current.as_mut() {
            lines.push(line.strip_prefix("    ").unwrap_or(line));
        }
    }
    found
}

#[test]
fn the_readme_shows_each_way_to_configure_as_compiled() {
    let found = blocks(include_str!("readme/configure.rs"));
    let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["url", "typed", "own"]);
    let readme = include_str!("../../README.md");
    for (name, block) in found {
        assert!(
            readme.contains(&block),
            "README.md does not show the block {name:?} of tests/readme/configure.rs:\n{block}"
        );
    }
}
