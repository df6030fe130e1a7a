//! The library's users import the facade only: every `tokensel::` path written in
//! tests/, python/src/, examples/ and benches/ starts with `tokensel::prelude` or names one
//! of the root items (`Config`, `Error`, `Result`, `main_entry`). The library's modules
//! are `pub(crate)`, so a path into them does not compile today; this test names the
//! offending files and lines before the compiler's "private module" error does, and
//! also catches paths in comments and in files no target builds. This file is not
//! scanned (its samples are violations on purpose).

use std::path::{Path, PathBuf};

/// What may follow `tokensel::` outside the library.
const ALLOWED: [&str; 5] = ["prelude", "Config", "Error", "Result", "main_entry"];

/// The directories scanned, relative to the crate root.
const ROOTS: [&str; 4] = ["tests", "python/src", "examples", "benches"];

/// Every `tokensel::X` in `text` whose first segment `X` is not in [`ALLOWED`], as
/// (line number, the path's first segment). A grouped root import `tokensel::{...}`
/// counts as a violation (its segment is `{`).
fn violations(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("tokensel::") {
            // a longer identifier ending in `tokensel` (e.g. `my_tokensel::`) is not ours
            let before = rest[..at].chars().next_back();
            let after = &rest[at + "tokensel::".len()..];
            rest = after;
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let seg: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let seg = if seg.is_empty() {
                after.chars().take(1).collect()
            } else {
                seg
            };
            if !ALLOWED.contains(&seg.as_str()) {
                out.push((i + 1, seg));
            }
        }
    }
    out
}

/// The `.rs` files under `dir`, recursively, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn users_import_the_facade_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for r in ROOTS {
        rust_files(&root.join(r), &mut files);
    }
    // the scan reaches the users it guards: the tests, the Python binding, the example
    // and the bench (a moved directory would otherwise make this test vacuous)
    for must in [
        "tests/common/mod.rs",
        "python/src/lib.rs",
        "examples/prompt_measure.rs",
        "benches/step.rs",
    ] {
        assert!(files.contains(&root.join(must)), "{must} not scanned");
    }
    let mut bad = Vec::new();
    let mut paths = 0;
    let this = root.join("tests/facade.rs");
    for f in files.iter().filter(|f| **f != this) {
        let text = std::fs::read_to_string(f).unwrap();
        paths += text.matches("tokensel::").count();
        for (line, seg) in violations(&text) {
            bad.push(format!(
                "{}:{line}: tokensel::{seg}",
                f.strip_prefix(root).unwrap().display()
            ));
        }
    }
    assert!(paths > 100, "only {paths} tokensel:: paths found");
    assert!(
        bad.is_empty(),
        "paths outside the facade (import them from tokensel::prelude):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scan_names_paths_outside_the_facade() {
    let text = "use tokensel::prelude::*;\n\
                use tokensel::train::drive::{Control, drive};\n\
                let c = tokensel::Config::default(); // tokensel::io::state\n\
                use tokensel::{Error, config::Mode};\n\
                use my_tokensel::io;\n";
    assert_eq!(
        violations(text),
        vec![
            (2, "train".to_string()),
            (3, "io".to_string()),
            (4, "{".to_string())
        ]
    );
    assert!(violations("tokensel::prelude::kernels::dot; tokensel::Result<()>").is_empty());
}
