//! The repository's documents against what exists: they point only to
//! files a user has, mention only parts that exist, and say how to install
//! the command and which clock rule it applies.

use std::fs;
use std::path::{Path, PathBuf};

mod common;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every text file a user reads: Markdown, Rust (rustdoc), Lua, TOML.
fn documents(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if path.is_dir() {
            documents(&path, out);
        } else if ["md", "rs", "lua", "toml"]
            .iter()
            .any(|ext| path.extension().is_some_and(|e| e == *ext))
        {
            out.push(path);
        }
    }
}

/// The documents whose text satisfies `test`, this file aside (it names
/// what it looks for).
fn documents_where(test: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut files = Vec::new();
    documents(&root(), &mut files);
    files
        .into_iter()
        .filter(|f| !f.ends_with("tollgate-cli/tests/docs.rs"))
        .filter(|f| test(&fs::read_to_string(f).unwrap()))
        .collect()
}

fn mentions(needle: &str) -> Vec<PathBuf> {
    documents_where(|text| text.contains(needle))
}

/// Whether a crate whose directory name contains `part` exists.
fn crate_exists(part: &str) -> bool {
    fs::read_dir(root().join("crates"))
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().contains(part))
}

#[test]
fn documents_point_to_the_semantics_in_the_repository() {
    // The team's contract, SPEC.md, is not in the repository: no "SPEC.md",
    // "SPEC's" or "SPEC invariant" (but "SPECIFIC" is fine).
    let names_it = |text: &str| {
        text.match_indices("SPEC")
            .any(|(at, _)| !text[at + 4..].starts_with(|c: char| c.is_ascii_alphanumeric()))
    };
    assert_eq!(documents_where(names_it), Vec::<PathBuf>::new());
    assert!(root().join("docs/SEMANTICS.md").is_file());
}

#[test]
fn documents_mention_only_stores_and_servers_that_exist() {
    for (name, part) in [("PostgreSQL", "pg"), ("HTTP server", "http")] {
        if !crate_exists(part) {
            assert_eq!(mentions(name), Vec::<PathBuf>::new(), "{name}");
        }
    }
}

#[test]
fn the_readme_says_how_to_put_the_command_on_the_path() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("cargo install --path crates/tollgate-cli"));
    let manifest = fs::read_to_string(root().join("crates/tollgate-cli/Cargo.toml")).unwrap();
    assert!(manifest.contains("[[bin]]\nname = \"tollgate\""));
}

/// The README's rule, run: a request earlier than the key's last charge
/// counts as that charge's time, and a denial in between does not move it.
#[test]
fn the_readme_states_the_clock_rule_replay_applies() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.contains("earlier than the key's last charge"),
        "README's clock sentence"
    );
    // One per 100 ns: charged at 100, denied at 150. A request at 120 is
    // decided at 120 (had the denial moved the clock, at 150: a wait of 50
    // ns); one at 90 at the charge's time, 100.
    let out = common::run(
        &common::replay_args(["gcra", "1", "100ns"], &[]),
        "t_ns,key,cost\n100,k,1\n150,k,1\n120,k,1\n90,k,1\n",
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let late: Vec<&str> = stdout.lines().skip(3).collect();
    assert_eq!(late, ["120,k,1,0,0,80,0", "90,k,1,0,0,100,0"]);
}
