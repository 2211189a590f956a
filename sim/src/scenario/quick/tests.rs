//! The quick reader against serde_yaml: wherever it reads a text, it reads what serde_yaml
//! reads, and a scenario built from its tree is the one built from serde_yaml's, errors and
//! their locations included.

use proptest::prelude::*;
use serde_yaml::Value;

use super::read;
use crate::scenario::{build, locate::Root};

/// serde_yaml's reading of `text`, which the quick reader must match wherever it reads it.
fn agrees(text: &str) -> bool {
    match read(text) {
        Some(node) => serde_yaml::from_str::<Value>(text).ok() == Some(node.to_value()),
        None => false,
    }
}

#[test]
fn reads_what_serde_yaml_reads() {
    let texts = [
        "a: 1\nb: -1\nc: 0\nd: 18446744073709551615\ne: -9223372036854775808\n",
        "a: ~\nb: null\nc: Null\nd: NULL\ne: true\nf: FALSE\ng: True\n",
        "a: yes\nb: no\nc: on\nd: 512Gi\ne: 1_000\nf: 2024-01-01\ng: 12:30\nh: x:y\n",
        "a: inf\nb: nan\nc: infinity\nd: e5\ne: ~x\nf: _1\ng: /x\nh: 500m\n",
        "a: b c  # comment\nb: b#c\nc: 'it''s'\nd: \"x # y\"\ne: \"\"\nf: ''\ng: \"8\"\nh: '8'\n",
        "a:\nb: # comment\nc:   \n  d: 1\n",
        "a:\n- 1\n- 2\nb: 3\n",
        "a:\n  - 1\n  -\n  - x\n  - # c\n",
        "- a\n- b: 1\n  c: 2\n-   d: 3\n    e: [1, {f: g}]\n",
        "a: {}\nb: []\nc: { }\nd: [ ]\n",
        "a: {b: [1, 2], c: {d: e}, f: [a b, c]}\n",
        "a: {b: x,\n   c: y}\nb: [\n  1,\n  # c\n\n  2\n  ]\n",
        "- {name: a, queue: q,\n   tasks: [{name: w, replicas: 2,  # c\n            running: [n1, n1]}]}\n",
        "a: >\n  one\n  two\n\nb: 1\n",
        "a: |\n  one\n  two\nb: >\n    x\n# c\nc: 1\n",
        "- >\n  x\n  y\n- |\n  z\n",
        "a: é — ü\nb: \"ü\"\n",
        "a: b\n\n\n# end\n",
        "a: 1",
        "# head\n\na:\n  b:\n    c: [d]\n",
    ];
    for text in texts {
        assert!(agrees(text), "{text:?}: {:?}", read(text).map(|n| n.to_value()));
    }
}

#[test]
fn leaves_to_serde_yaml_what_it_does_not_read() {
    let deep = format!("a: {}{}\n", "[".repeat(200), "]".repeat(200));
    let texts = [
        "",
        "# only\n",
        "  a: 1\n",
        "---\na: 1\n",
        "a: 1\n---\nb: 2\n",
        "%YAML 1.2\n---\na: 1\n",
        "a: &x 1\nb: *x\n",
        "a: !t 1\n",
        "a: !!str 1\n",
        "a: 1.5\n",
        "a: 1e3\n",
        "a: 0x1F\n",
        "a: 0o7\n",
        "a: 012\n",
        "a: +1\n",
        "a: -0\n",
        "a: .inf\n",
        "a: 18446744073709551616\n",
        "a: -9223372036854775809\n",
        "a: \"x\\ny\"\n",
        "a: 'x\n  y'\n",
        "a: b\n  c\n",
        "a: [b\n  c]\n",
        "a: 1\na: 2\n",
        "a: {b: 1, b: 2}\n",
        "a: [1, 2,]\n",
        "a: {b: 1,}\n",
        "a:\tb\n",
        "a: b\r\n",
        "\u{feff}a: 1\n",
        "a: b: c\n",
        "a: - b\n",
        "? a\n: b\n",
        "\"a\": 1\n",
        "1: a\n",
        "null: a\n",
        "true: a\n",
        "é: 1\n",
        "a: >-\n  x\n",
        "a: >\n  x\n    y\n",
        "a: >\n  x\n\n  y\n",
        "a: |\n\n  x\n",
        "a: >\n  x",
        "a: >\nb: 1\n",
        "a:\n  b: 1\n c: 2\n",
        "a: [1,\n2]\n",
        "a: {b:\n  1}\n",
        "a: @x\n",
        "a: `x\n",
        "a: [a: b]\n",
        "a: b\n- c\n",
        "- - a\n",
        "a: \"x\"y\n",
        "a: [1]x\n",
        &deep,
    ];
    for text in texts {
        assert_eq!(read(text), None, "{text:?}");
    }
}

#[test]
fn reads_every_scenario_of_the_repository_as_serde_yaml_does() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios");
    let mut read = 0;
    for entry in std::fs::read_dir(dir).expect("the scenarios folder") {
        let path = entry.expect("a scenario file").path();
        let text = std::fs::read_to_string(&path).expect("a scenario file");
        assert!(agrees(&text), "{} is not read quickly, or read otherwise than by serde_yaml", path.display());
        read += 1;
    }
    assert!(read > 50, "only {read} scenarios in {dir}");
}

/// Texts that random edits start from: every construct the reader reads.
const SEEDS: &[&str] = &[
    "name: s\ndescription: >\n  one\n  two\ncycles: 2\nnodes:\n  - name: n1\n    allocatable: {cpu: \"8\", memory: 32Gi}\n    labels: {zone: a}\n    taints: [{key: k, value: v, effect: NoSchedule}]\n",
    "queues:\n- name: q\n  deserved: {nvidia.com/gpu: '4'}  # quota\n- {name: p, parent: q,\n   limit: {cpu: 2}}\njobs:\n  - name: j1\n    tasks:\n      - name: w\n        replicas: 2\n        running: [n1, n1]\n",
    "a: |\n  x # y\n  z\nb: [1, -2, ~, null, true, x y, 'q''s', \"d\"]\nc:\n  -\n  - {}\n  - []\n",
];

/// What random edits insert: YAML's indicators, line breaks, indentation and scalars.
const PIECES: &[&str] = &[
    " ", "  ", "\n", "\n  ", "\n    ", "- ", "-", ":", ": ", "#", " #", ",", "{", "}", "[", "]", "\"", "'", "''", ">",
    "|", "&a ", "*a", "!t ", "~", "null", "true", "1", "-1", "0", "01", "1.5", "x", "é", "\t", "\r", "---\n", "? ",
    "\\", "a: b", "\n- ", "\na: ", ".inf", "0x1",
];

/// Scenarios that random edits start from, to compare the scenarios (or errors) built.
const SCENARIOS: &[&str] = &[
    include_str!("../../../../scenarios/example.yaml"),
    include_str!("../../../../scenarios/elastic-shrinks-by-half.yaml"),
    include_str!("../../../../scenarios/topology-slices-each-in-one-rack.yaml"),
    include_str!("../../../../scenarios/time-based-fair-share-favours-the-queue-that-used-less.yaml"),
    include_str!("../../../../scenarios/predicates-affinity.yaml"),
    include_str!("../../../../scenarios/predicates-taints.yaml"),
    include_str!("../../../../scenarios/placement-per-pool.yaml"),
];

/// One of `seeds` with a few random edits: pieces inserted, characters deleted or replaced.
fn edited(seeds: &'static [&'static str]) -> impl Strategy<Value = String> {
    let edit = (any::<prop::sample::Index>(), 0..3usize, 0..PIECES.len());
    (0..seeds.len(), prop::collection::vec(edit, 1..5)).prop_map(move |(seed, edits)| {
        let mut text = seeds[seed].to_string();
        for (at, kind, piece) in edits {
            let mut at = at.index(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let next = text[at..].chars().next().map_or(at, |c| at + c.len_utf8());
            match kind {
                0 => text.insert_str(at, PIECES[piece]),
                1 => text.replace_range(at..next, ""),
                _ => text.replace_range(at..next, PIECES[piece]),
            }
        }
        text
    })
}

proptest! {
    #[test]
    fn never_reads_a_text_otherwise_than_serde_yaml(text in edited(SEEDS)) {
        if let Some(node) = read(&text) {
            prop_assert_eq!(serde_yaml::from_str::<Value>(&text).ok(), Some(node.to_value()), "{:?}", text);
        }
    }

    #[test]
    fn a_scenario_is_the_same_from_either_tree(text in edited(SCENARIOS)) {
        if let (Some(node), Ok(value)) = (read(&text), serde_yaml::from_str::<Value>(&text)) {
            let quick = format!("{:?}", build(&text, "f.yaml", Root::Quick(&node)));
            prop_assert_eq!(quick, format!("{:?}", build(&text, "f.yaml", Root::Yaml(&value))), "{:?}", text);
        }
    }
}
