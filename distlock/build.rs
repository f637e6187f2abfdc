//! Makes the guides (`guides/*.md`, the same files the repository shows) into the text
//! of the `distlock::guides` modules, so docs.rs carries them beside the API:
//!
//! - a link to another guide, `[text](locks.md#section)`, becomes an intra-doc link,
//!   `[text](crate::guides::locks#section)`, which rustdoc resolves (and, under
//!   `-D warnings`, refuses when it cannot);
//! - a figure, `![alt](img/x.svg)`, is carried inside the page as a data URL, since
//!   docs.rs serves no file of the package beside the pages;
//! - a Rust block is shown and not run as a doctest (`rust,ignore`): each is a part of
//!   a file under `tests/readme/` that the facade's tests build word for word, and a
//!   part does not build on its own; a block with no language is shown as text.

use std::path::Path;

/// The guides, by file stem: each is the module `distlock::guides::<stem>`.
const GUIDES: [&str; 6] = [
    "locks",
    "fencing",
    "configuration",
    "operating",
    "backends",
    "benchmarks",
];

fn main() {
    let out = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rerun-if-changed=guides");
    for guide in GUIDES {
        let source = Path::new("guides").join(format!("{guide}.md"));
        println!("cargo:rerun-if-changed={}", source.display());
        let text = std::fs::read_to_string(&source)
            .unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        let page = rustdoc_page(&text, |figure| {
            let path = Path::new("guides").join(figure);
            println!("cargo:rerun-if-changed={}", path.display());
            std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        });
        let target = Path::new(&out).join(format!("{guide}.md"));
        std::fs::write(&target, page).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
    }
}

/// `markdown` as rustdoc should read it; `figure` reads a figure's bytes by its path.
fn rustdoc_page(markdown: &str, mut figure: impl FnMut(&str) -> Vec<u8>) -> String {
    let mut page = String::with_capacity(markdown.len());
    let mut in_block = false;
    for line in markdown.lines() {
        if let Some(info) = line.strip_prefix("```") {
            let info = info.trim();
            let shown = match (in_block, info) {
                (false, "") => "```text".to_owned(),
                (false, "rust") => "```rust,ignore".to_owned(),
                _ => line.to_owned(),
            };
            in_block = !in_block;
            page.push_str(&shown);
        } else if in_block {
            page.push_str(line);
        } else {
            page.push_str(&links(line, &mut figure));
        }
        page.push('\n');
    }
    page
}

/// `line` with each link to a guide made an intra-doc link and each figure a data URL.
fn links(line: &str, figure: &mut impl FnMut(&str) -> Vec<u8>) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let (before, from) = rest.split_at(at + 2);
        out.push_str(before);
        let Some(end) = from.find(')') else {
            rest = from;
            break;
        };
        let target = &from[..end];
        let (file, fragment) = match target.split_once('#') {
            Some((file, fragment)) => (file, Some(fragment)),
            None => (target, None),
        };
        let guide = file
            .strip_suffix(".md")
            .filter(|stem| GUIDES.contains(stem));
        if let Some(stem) = guide {
            out.push_str("crate::guides::");
            out.push_str(stem);
            if let Some(fragment) = fragment {
                out.push('#');
                out.push_str(fragment);
            }
        } else if file.starts_with("img/") && file.ends_with(".svg") {
            out.push_str("data:image/svg+xml;base64,");
            out.push_str(&base64(&figure(file)));
        } else if target.starts_with("http") || target.starts_with('#') {
            out.push_str(target);
        } else {
            // docs.rs serves only the pages: any other file of the repository is out
            // of a reader's reach there.
            panic!("a guide links to {target}, which docs.rs cannot show");
        }
        out.push(')');
        rest = &from[end + 1..];
    }
    out.push_str(rest);
    out
}

/// `bytes` in standard base64, with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                let index = (n >> (18 - 6 * i)) & 63;
                out.push(char::from(ALPHABET[index as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
