//! The README's "Protect an axum app" code is this crate's first doc test,
//! and its "Calling a rate-limited API" code the client module's, line for
//! line, so both are compiled and run with the other tests.

fn rust_block_after(text: &str, marker: &str, strip: &str) -> Vec<String> {
    let start = text.find(marker).unwrap_or_else(|| panic!("no `{marker}`"));
    text[start..]
        .lines()
        .map(|l| l.strip_prefix(strip).unwrap_or(l.trim_start_matches("//!")))
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .filter(|l| !l.starts_with("# "))
        .map(str::to_string)
        .collect()
}

#[test]
fn readme_example_is_the_crate_doc_test() {
    let readme = include_str!("../../../README.md");
    let lib = include_str!("../src/lib.rs");
    let in_readme = rust_block_after(readme, "## Protect an axum app", "");
    let in_docs = rust_block_after(lib, "//! tollgate-http", "//! ");
    assert!(in_readme.len() <= 10, "{} lines", in_readme.len());
    assert_eq!(in_readme, in_docs);
}

#[test]
fn readme_client_example_is_the_client_doc_test() {
    let readme = include_str!("../../../README.md");
    let client = include_str!("../src/client/mod.rs");
    let in_readme = rust_block_after(readme, "## Calling a rate-limited API", "");
    let in_docs = rust_block_after(client, "//! The client side", "//! ");
    assert!(in_readme.len() <= 10, "{} lines", in_readme.len());
    assert_eq!(in_readme, in_docs);
}
