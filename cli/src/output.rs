//! The output formats of the user commands: a table for people, JSON or YAML for programs.

use serde::Serialize;

/// What `-o` selects.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// JSON, keys in a fixed order.
    Json,
    /// YAML, keys in a fixed order.
    Yaml,
}

/// Prints `value` in `format`, using `table` for the human form.
pub fn print<T: Serialize>(format: Format, value: &T, table: impl FnOnce(&T) -> String) {
    match format {
        Format::Table => print!("{}", table(value)),
        Format::Json => println!("{}", serde_json::to_string_pretty(value).expect("output serializes")),
        Format::Yaml => print!("{}", serde_yaml::to_string(value).expect("output serializes")),
    }
}

/// Lays out `rows` under `header` in columns separated by two spaces.
pub fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}
