//! The README's quick start is `tests/readme/quick_start.rs`, word for word, and it runs.

mod quick_start {
    include!("readme/quick_start.rs");

    #[test]
    fn the_readme_quick_start_runs() {
        main().expect("the quick start runs");
    }
}

#[test]
fn the_readme_quick_start_is_the_example() {
    let example = include_str!("readme/quick_start.rs");
    // Everything but the first line, which says where the file is shown.
    let body = example
        .split_once('\n')
        .map(|(_, rest)| rest)
        .unwrap_or(example);
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(body),
        "README.md's quick start differs from tests/readme/quick_start.rs"
    );
}
