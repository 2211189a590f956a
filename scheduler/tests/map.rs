//! The map keeps up with the territory: `docs/architecture.md` names every file of the core and
//! every `Rule`, and the README's layout names every plugin, action and controller, so a
//! newcomer who reads them finds what exists.

use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the crate lies in the repository").to_path_buf()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `.rs` file under `dir`, as a path relative to `dir` with `/` separators.
fn rust_files(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, base, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(base).expect("under the base").to_string_lossy().replace('\\', "/");
            out.push(rel);
        }
    }
}

/// The variants of `pub enum NAME` in `source`, in order.
fn variants(source: &str, name: &str) -> Vec<String> {
    let body = source.split(&format!("pub enum {name} {{")).nth(1).unwrap_or_else(|| panic!("enum {name}"));
    let body = body.split("\n}").next().expect("the enum ends");
    body.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split([',', '(', ' ', '{']).next())
        .filter(|v| v.chars().next().is_some_and(char::is_uppercase))
        .map(str::to_string)
        .collect()
}

/// The modules `source` declares `pub mod`, in order.
fn public_modules(source: &str) -> Vec<String> {
    source.lines().filter_map(|l| l.strip_prefix("pub mod ")).map(|m| m.trim_end_matches(';').to_string()).collect()
}

/// The entries of `wanted` that `text` does not name in any of the forms `quoted` gives.
fn missing<'a>(text: &str, wanted: &'a [String], quoted: impl Fn(&str) -> Vec<String>) -> Vec<&'a String> {
    wanted.iter().filter(|w| !quoted(w).iter().any(|q| text.contains(q.as_str()))).collect()
}

#[test]
fn the_architecture_names_every_file_of_the_core() {
    let src = repo().join("scheduler/src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    assert!(files.len() > 60, "the core's files were read: {}", files.len());
    let map = read(&repo().join("docs/architecture.md"));
    let lacking = missing(&map, &files, |f| vec![format!("`{f}`"), format!("`scheduler/src/{f}`")]);
    assert!(lacking.is_empty(), "docs/architecture.md names no {lacking:?}: add each to the table of the core");
}

#[test]
fn the_architecture_names_every_rule() {
    let rules = variants(&read(&repo().join("scheduler/src/why.rs")), "Rule");
    assert!(rules.len() >= 30, "the rules were read: {rules:?}");
    let map = read(&repo().join("docs/architecture.md"));
    let lacking = missing(&map, &rules, |r| vec![format!("| `{r}` |")]);
    assert!(lacking.is_empty(), "docs/architecture.md's refusals by name lack {lacking:?}");
}

#[test]
fn the_readme_layout_names_every_plugin_action_and_controller() {
    let readme = read(&repo().join("README.md"));
    let layout = readme.split("## Layout").nth(1).expect("README has a Layout section");
    let layout = layout.split("\n## ").next().expect("the section ends");
    let plugins = public_modules(&read(&repo().join("scheduler/src/plugins/mod.rs")));
    assert!(plugins.len() >= 11, "the plugins were read: {plugins:?}");
    let actions: Vec<String> = variants(&read(&repo().join("scheduler/src/config.rs")), "ActionName")
        .iter()
        .map(|a| a.to_lowercase())
        .collect();
    assert!(actions.len() >= 7, "the actions were read: {actions:?}");
    let controllers = public_modules(&read(&repo().join("controllers/src/lib.rs")));
    assert!(controllers.len() >= 4, "the controllers were read: {controllers:?}");
    for (what, names) in [("plugin", &plugins), ("action", &actions), ("controller", &controllers)] {
        let lacking = missing(layout, names, |n| vec![format!("`{n}`")]);
        assert!(lacking.is_empty(), "README's layout names no {what} {lacking:?}");
    }
}
