//! Every Rust block of the docs is code built here: README.md, CONTRIBUTING.md,
//! distlock/guides/*.md and each crate's README.md show only a block of `tests/readme/*.rs`
//! (between `// begin: NAME` and `// end`, word for word) or a whole example file of
//! that folder, or a block of `distlock-sim/tests/readme.rs` (the simulation's, which
//! this crate does not depend on). Those files are compiled: `guides.rs` here,
//! `configure.rs` by `tests/configure.rs`, the quick starts by `tests/readme.rs`,
//! which also runs them, the simulation's by its crate's tests. So a stale example in
//! the docs fails the tests.

use std::path::{Path, PathBuf};

#[allow(dead_code, unused_variables, unused_mut, unused_imports)]
mod guides {
    include!("readme/guides.rs");
}

/// The blocks of `source` between `// begin: NAME` and `// end`, each line without
/// the indentation of its `begin` line.
fn marked_blocks(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<(usize, Vec<&str>)> = None;
    for line in source.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("// begin: ") {
            current = Some((line.len() - trimmed.len(), Vec::new()));
        } else if trimmed == "// end" {
            if let Some((_, lines)) = current.take() {
                found.push(lines.join("\n"));
            }
        } else if let Some((indent, lines)) = current.as_mut() {
            lines.push(line.get(*indent..).unwrap_or(line.trim_start()));
        }
    }
    found
}

/// The Rust blocks of a Markdown text (```rust, with or without attributes).
fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in markdown.lines() {
        match current.as_mut() {
            None if line.starts_with("```rust") => current = Some(Vec::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => {
                if let Some(lines) = current.take() {
                    found.push(lines.join("\n"));
                }
            }
            Some(lines) => lines.push(line),
        }
    }
    found
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every Markdown file a reader meets: the README, the contributing guide, the guides
/// and each crate's README (the facade's is its crates.io page).
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    let listed = |dir: PathBuf| -> Vec<PathBuf> {
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .collect()
    };
    files.extend(
        listed(root.join("distlock").join("guides"))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    files.extend(
        listed(root.clone())
            .into_iter()
            .map(|dir| dir.join("README.md"))
            .filter(|p| p.is_file()),
    );
    files
}

#[test]
fn every_rust_block_of_the_docs_is_built_here() {
    let sources: Vec<String> = std::fs::read_dir(root().join("distlock/tests/readme"))
        .expect("tests/readme")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .chain([root().join("distlock-sim/tests/readme.rs")])
        .map(|p| std::fs::read_to_string(p).expect("a source"))
        .collect();
    let marked: Vec<String> = sources.iter().flat_map(|s| marked_blocks(s)).collect();
    let mut checked = 0;
    let mut missing = Vec::new();
    let texts: Vec<(PathBuf, String)> = documents()
        .into_iter()
        .map(|d| {
            let text = std::fs::read_to_string(&d).expect("a document");
            (d, text)
        })
        .collect();
    // The other way round: each marked block is shown somewhere.
    for block in &marked {
        if !texts
            .iter()
            .any(|(_, text)| rust_blocks(text).contains(block))
        {
            missing.push(format!(
                "a block of tests/readme that no document shows:\n{block}"
            ));
        }
    }
    for (document, text) in &texts {
        for block in rust_blocks(text) {
            checked += 1;
            let built = marked.contains(&block)
                || sources.iter().any(|s| {
                    // A whole example: everything after its first line, which says
                    // where it is shown.
                    s.split_once('\n')
                        .is_some_and(|(_, body)| body.contains(&block))
                });
            if !built {
                missing.push(format!("{}:\n{block}", document.display()));
            }
        }
    }
    assert!(
        checked >= 18,
        "only {checked} Rust blocks found: the scan missed some"
    );
    assert!(
        missing.is_empty(),
        "Rust blocks of the docs that no test builds, or built and not shown:\n\n{}",
        missing.join("\n\n")
    );
}

#[test]
fn the_checker_finds_blocks_and_their_indentation() {
    let source = "fn f() {\n        // begin: x\n        let a = 1;\n            nested();\n        // end\n}";
    assert_eq!(marked_blocks(source), ["let a = 1;\n    nested();"]);
    let markdown = "text\n```rust,ignore\nlet b = 2;\n```\n```sh\nls\n```\n```rust\nc();\n```";
    assert_eq!(rust_blocks(markdown), ["let b = 2;", "c();"]);
}

/// The links of a Markdown text: the targets of `[text](target)`.
fn link_targets(markdown: &str) -> Vec<&str> {
    markdown
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .collect()
}

/// A published crate's README is its crates.io page, where a relative link has no
/// repository to resolve against (the manifests name none): every link there is
/// absolute, or to a place on the same page.
#[test]
fn every_published_readme_links_only_where_crates_io_can_follow() {
    let root = root();
    let mut checked = 0;
    let mut broken = Vec::new();
    for entry in std::fs::read_dir(&root).expect("the workspace") {
        let dir = entry.expect("an entry").path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        if manifest.contains("publish = false") || !manifest.contains("[package]") {
            continue;
        }
        let readme = dir.join("README.md");
        assert!(
            readme.is_file() && !readme.is_symlink(),
            "{}: a published crate needs a README.md of its own",
            dir.display()
        );
        checked += 1;
        let text = std::fs::read_to_string(&readme).expect("a README");
        for target in link_targets(&text) {
            if !(target.starts_with("https://") || target.starts_with('#')) {
                broken.push(format!("{}: ({target})", readme.display()));
            }
        }
    }
    assert!(checked >= 8, "only {checked} published crates found");
    assert!(
        broken.is_empty(),
        "links crates.io cannot follow:\n{}",
        broken.join("\n")
    );
}

/// In the repository, a relative link names a file that is there (a guide's link to a
/// section of another guide is checked on the pages docs.rs shows, by
/// `scripts/check-doc-links.py`).
#[test]
fn every_relative_link_of_the_docs_names_a_file_that_is_there() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for document in documents() {
        let text = std::fs::read_to_string(&document).expect("a document");
        for target in link_targets(&text) {
            let path = target.split('#').next().unwrap_or(target);
            if path.is_empty() || path.contains("://") {
                continue;
            }
            checked += 1;
            let dir = document.parent().expect("a document's folder");
            if !dir.join(path).exists() {
                broken.push(format!("{}: ({target})", document.display()));
            }
        }
    }
    assert!(checked >= 30, "only {checked} relative links found");
    assert!(
        broken.is_empty(),
        "links to files that are not there:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_link_check_finds_relative_links() {
    let text =
        "see [the guide](distlock/guides/fencing.md), [docs.rs](https://docs.rs/x) and [here](#a)";
    assert_eq!(
        link_targets(text),
        ["distlock/guides/fencing.md", "https://docs.rs/x", "#a"]
    );
}

/// The conformance README's minimal backend keeps the contract: every case it can run
/// (no server control, links or second clients are given) passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_backend_of_the_conformance_readme_passes_the_suite() {
    let backend = std::sync::Arc::new(guides::minimal::MapBackend::default());
    let report = distlock_conformance::run_suite(&distlock_conformance::Target::new(backend)).await;
    let failed: Vec<String> = report
        .cases
        .iter()
        .filter_map(|c| match &c.outcome {
            distlock_conformance::Outcome::Failed(why) => Some(format!("{}: {why}", c.name)),
            _ => None,
        })
        .collect();
    let (passed, _, skipped) = report.counts();
    eprintln!("the minimal backend: {passed} cases passed, {skipped} not run");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(passed >= 30, "only {passed} cases ran");
}
