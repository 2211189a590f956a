//! Every hook a plugin overrides is one it declares: the framework walks a plugin only for the
//! hooks its `Plugin::hooks` names, so an override left undeclared would never be called.
//! Read from the plugins' sources, as a newcomer adding a hook would write it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// `Hook` variants by the `Plugin` method each stands for, from their doc links in `plugin.rs`.
fn hooks_by_method(plugin_rs: &str) -> BTreeMap<String, String> {
    let body = plugin_rs.split("pub enum Hook {").nth(1).expect("plugin.rs declares enum Hook");
    let body = body.split("\n}").next().expect("enum Hook ends");
    let mut out = BTreeMap::new();
    let mut method = None;
    for line in body.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("/// [`Plugin::") {
            method = rest.split('`').next().map(str::to_string);
        } else if let Some(variant) = line.strip_suffix(',') {
            if let Some(m) = method.take() {
                out.insert(m, variant.to_string());
            }
        }
    }
    out
}

/// The body of `impl Plugin for ...` in `source`, if the file has one.
fn plugin_impl(source: &str) -> Option<&str> {
    let start = source.find("impl Plugin for ")?;
    let rest = &source[start..];
    // The impl ends at the first closing brace in column 0.
    Some(&rest[..rest.find("\n}").map_or(rest.len(), |e| e + 2)])
}

/// The methods an impl block defines (4-space indented `fn`s).
fn methods(block: &str) -> Vec<String> {
    block
        .lines()
        .filter_map(|l| l.strip_prefix("    fn "))
        .filter_map(|l| l.split(['(', '<']).next())
        .map(str::to_string)
        .collect()
}

/// Whether the text of a `hooks` method names `variant` as a whole word.
fn declares(hooks_body: &str, variant: &str) -> bool {
    hooks_body.split(|c: char| !c.is_alphanumeric() && c != '_').any(|word| word == variant)
}

/// The text of the `hooks` method of an impl block.
fn hooks_body(block: &str) -> &str {
    let start = block.find("    fn hooks(").expect("every plugin declares its hooks");
    let rest = &block[start..];
    &rest[..rest.find("\n    }").map_or(rest.len(), |e| e + 6)]
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_overridden_hook_is_declared() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let hooks = hooks_by_method(&fs::read_to_string(src.join("plugin.rs")).expect("plugin.rs"));
    assert!(hooks.len() >= 16, "the Hook enum's doc links were read: {hooks:?}");
    let mut files = Vec::new();
    rust_files(&src.join("plugins"), &mut files);
    let mut plugins = 0;
    for file in files {
        let source = fs::read_to_string(&file).expect("a plugin source");
        let Some(block) = plugin_impl(&source) else { continue };
        plugins += 1;
        let declared = hooks_body(block);
        for method in methods(block) {
            if let Some(variant) = hooks.get(&method) {
                assert!(
                    declares(declared, variant),
                    "{}: overrides Plugin::{method} but its hooks() does not declare Hook::{variant}, so it is never called",
                    file.display()
                );
            }
        }
    }
    assert!(plugins >= 11, "every plugin was read ({plugins})");
}

#[test]
fn an_undeclared_override_is_caught() {
    let plugin_rs = "pub enum Hook {\n    /// [`Plugin::queue_order`].\n    QueueOrder,\n}\n";
    let hooks = hooks_by_method(plugin_rs);
    // Declaring a hook whose name starts with another's does not declare that other.
    let source = "impl Plugin for P {\n    fn hooks(&self) -> Vec<Hook> {\n        vec![QueueOrderLater]\n    }\n\n    fn queue_order(&self) {}\n}\n";
    let block = plugin_impl(source).expect("an impl");
    let undeclared: Vec<String> =
        methods(block).into_iter().filter(|m| hooks.get(m).is_some_and(|v| !declares(hooks_body(block), v))).collect();
    assert_eq!(undeclared, vec!["queue_order".to_string()]);
}
