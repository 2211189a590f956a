//! A quick reader for the plain YAML that scenario files are written in: block mappings and
//! lists, flow mappings and lists, one-line plain and quoted scalars without escapes, folded
//! and literal text, comments. serde_yaml (libyaml's events, then a `Value` tree) reads a
//! 10,000-node scenario in about 250 ms; this reader takes about 25 ms.
//!
//! It reads nothing differently from serde_yaml: on anything outside that subset (anchors,
//! tags, escapes, floats, multi-line scalars, tabs, several documents, ...) and on
//! anything serde_yaml would refuse (a duplicate key, a bad indentation) it gives up, and the
//! caller reads the text with serde_yaml, which also words the errors.

use std::borrow::Cow;

use super::tree::{Node, Tree};

#[cfg(test)]
mod tests;

/// Deepest nesting read; serde_yaml refuses documents nested 128 deep.
const MAX_DEPTH: usize = 100;

/// Longest key read; libyaml refuses implicit keys longer than 1024 characters.
const MAX_KEY: usize = 1000;

/// The document `text` holds, or `None` when serde_yaml must read it.
pub(super) fn read(text: &str) -> Option<Node<'_>> {
    if !text.chars().all(printable) {
        return None;
    }
    let mut reader = Reader { text, at: 0, depth: 0, margin: 0 };
    let (indent, _) = reader.next_line()?;
    if indent != 0 {
        return None;
    }
    let root = reader.block(0)?;
    reader.next_line().is_none().then_some(root)
}

/// Characters libyaml accepts in a text, less the tab and line breaks other than `\n`.
fn printable(c: char) -> bool {
    matches!(c, '\n' | ' '..='~' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
        && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// Where reading is: `at` is a byte offset in `text`; `margin` is the indentation of the block
/// node that holds the flow collection being read, which its lines must go beyond.
struct Reader<'t> {
    text: &'t str,
    at: usize,
    depth: usize,
    margin: usize,
}

impl<'t> Reader<'t> {
    fn rest(&self) -> &'t [u8] {
        &self.text.as_bytes()[self.at..]
    }

    /// The key the current line goes on with, if any (see [`key`]).
    fn key(&self) -> Option<&'t str> {
        key(&self.text[self.at..])
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_spaces(&mut self) -> usize {
        let spaces = spaces(self.rest());
        self.at += spaces;
        spaces
    }

    /// Moves to the start of the next line that holds more than spaces and a comment, and
    /// says its indentation and offset; `None` at the end of the text.
    fn next_line(&mut self) -> Option<(usize, usize)> {
        loop {
            let indent = spaces(self.rest());
            match self.rest().get(indent) {
                None => return None,
                Some(b'\n') => self.at += indent + 1,
                Some(b'#') => self.skip_line(),
                Some(_) => return Some((indent, self.at + indent)),
            }
        }
    }

    fn skip_line(&mut self) {
        self.at = match self.rest().iter().position(|&b| b == b'\n') {
            Some(end) => self.at + end + 1,
            None => self.text.len(),
        };
    }

    /// Checks that the line goes on with nothing but spaces and a comment, and leaves it.
    fn end_of_line(&mut self) -> Option<()> {
        let spaces = self.skip_spaces();
        match self.peek() {
            None => Some(()),
            Some(b'\n') => {
                self.at += 1;
                Some(())
            }
            Some(b'#') if spaces > 0 => {
                self.skip_line();
                Some(())
            }
            Some(_) => None,
        }
    }

    fn nested<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let node = read(self);
        self.depth -= 1;
        node
    }

    /// The block node whose first line is the current one, indented by `indent`.
    fn block(&mut self, indent: usize) -> Option<Node<'t>> {
        self.at += indent;
        match entry(self.rest()) {
            true => self.nested(|r| r.sequence(indent)),
            false => self.nested(|r| r.mapping(indent)),
        }
    }

    /// A block list whose entries start at column `indent`; the current line is its first.
    fn sequence(&mut self, indent: usize) -> Option<Node<'t>> {
        let mut items = Vec::new();
        loop {
            self.at += 1;
            let spaces = self.skip_spaces();
            let item = match self.peek() {
                None | Some(b'\n' | b'#') => self.value_below(indent, false)?,
                Some(_) if entry(self.rest()) => return None,
                Some(_) if self.key().is_some() => self.nested(|r| r.mapping(indent + 1 + spaces))?,
                _ => self.inline(indent)?,
            };
            items.push(item);
            match self.next_line() {
                Some((i, at)) if i == indent && entry(&self.text.as_bytes()[at..]) => self.at = at,
                Some((i, _)) if i > indent => return None,
                _ => return Some(Node::Seq(items)),
            }
        }
    }

    /// A block mapping whose keys start at column `indent`; reading is at its first key.
    fn mapping(&mut self, indent: usize) -> Option<Node<'t>> {
        let mut entries = Vec::new();
        loop {
            let name = self.key()?;
            self.at += name.len() + 1;
            self.skip_spaces();
            let value = match self.peek() {
                None | Some(b'\n' | b'#') => self.value_below(indent, true)?,
                _ => self.inline(indent)?,
            };
            entries.push((Node::Str(Cow::Borrowed(name)), value));
            match self.next_line() {
                Some((i, at)) if i == indent => self.at = at,
                Some((i, _)) if i > indent => return None,
                _ => return unique(entries).map(Node::Map),
            }
        }
    }

    /// The value of a key or list entry (at column `indent`) that has nothing after it on its
    /// line: the block node below, a list at the same column after a key, or else null.
    fn value_below(&mut self, indent: usize, after_key: bool) -> Option<Node<'t>> {
        self.skip_line();
        let line = self.at;
        match self.next_line() {
            Some((i, _)) if i > indent => self.block(i),
            Some((i, at)) if i == indent && after_key && entry(&self.text.as_bytes()[at..]) => {
                self.at = at;
                self.nested(|r| r.sequence(indent))
            }
            _ => {
                self.at = line;
                Some(Node::Null)
            }
        }
    }

    /// A value written on the line of its key or list entry (at column `indent`), up to the end
    /// of the line.
    fn inline(&mut self, indent: usize) -> Option<Node<'t>> {
        match self.peek()? {
            b'>' | b'|' => self.text_block(indent),
            _ => {
                self.margin = indent;
                let node = self.flow(false)?;
                self.end_of_line()?;
                Some(node)
            }
        }
    }

    /// A flow node: a flow mapping or list, a quoted or a plain scalar. `in_flow` says whether
    /// it is inside a flow collection, where `,`, `]` and `}` end a plain scalar.
    fn flow(&mut self, in_flow: bool) -> Option<Node<'t>> {
        match self.peek()? {
            b'{' => self.nested(Self::flow_mapping),
            b'[' => self.nested(Self::flow_sequence),
            b'"' => self.double_quoted(),
            b'\'' => self.single_quoted(),
            _ => self.plain(in_flow),
        }
    }

    /// Skips spaces, line breaks and comments inside a flow collection, whose lines must be
    /// indented beyond its block node.
    fn skip_flow_space(&mut self) -> Option<()> {
        let mut after_space = false;
        loop {
            match self.peek()? {
                b' ' => self.at += 1,
                b'\n' => {
                    self.at += 1;
                    let indent = spaces(self.rest());
                    if indent <= self.margin && !matches!(self.rest().get(indent), Some(b'\n' | b'#')) {
                        return None;
                    }
                }
                b'#' if after_space => self.at += self.rest().iter().position(|&b| b == b'\n')?,
                _ => return Some(()),
            }
            after_space = true;
        }
    }

    /// `{key: value, ...}`, with the value of each key on the key's line.
    fn flow_mapping(&mut self) -> Option<Node<'t>> {
        self.at += 1;
        self.skip_flow_space()?;
        let mut entries = Vec::new();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Some(Node::Map(entries));
        }
        loop {
            let name = self.key()?;
            self.at += name.len() + 1;
            if self.skip_spaces() == 0 {
                return None;
            }
            entries.push((Node::Str(Cow::Borrowed(name)), self.flow(true)?));
            self.skip_flow_space()?;
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.skip_flow_space()?;
                }
                b'}' => {
                    self.at += 1;
                    return unique(entries).map(Node::Map);
                }
                _ => return None,
            }
        }
    }

    /// `[value, ...]`.
    fn flow_sequence(&mut self) -> Option<Node<'t>> {
        self.at += 1;
        self.skip_flow_space()?;
        let mut items = Vec::new();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Some(Node::Seq(items));
        }
        loop {
            items.push(self.flow(true)?);
            self.skip_flow_space()?;
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.skip_flow_space()?;
                }
                b']' => {
                    self.at += 1;
                    return Some(Node::Seq(items));
                }
                _ => return None,
            }
        }
    }

    /// `"..."` on one line, without escapes.
    fn double_quoted(&mut self) -> Option<Node<'t>> {
        let body = &self.text[self.at + 1..];
        let end = body.find(['"', '\\', '\n'])?;
        if body.as_bytes()[end] != b'"' {
            return None;
        }
        self.at += end + 2;
        Some(Node::Str(Cow::Borrowed(&body[..end])))
    }

    /// `'...'` on one line, `''` standing for `'`.
    fn single_quoted(&mut self) -> Option<Node<'t>> {
        let body = &self.text[self.at + 1..];
        let mut end = 0;
        loop {
            end += body[end..].find(['\'', '\n'])?;
            match body.as_bytes()[end..] {
                [b'\'', b'\'', ..] => end += 2,
                [b'\'', ..] => break,
                _ => return None,
            }
        }
        self.at += end + 2;
        let text = &body[..end];
        Some(Node::Str(if text.contains("''") { Cow::Owned(text.replace("''", "'")) } else { Cow::Borrowed(text) }))
    }

    /// A plain scalar on one line, resolved as serde_yaml resolves it.
    fn plain(&mut self, in_flow: bool) -> Option<Node<'t>> {
        let rest = self.rest();
        let starts_well = match rest.first()? {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'/' | b'~' | 0x80.. => true,
            b'-' => rest.get(1).is_some_and(u8::is_ascii_digit),
            _ => false,
        };
        if !starts_well {
            return None;
        }
        let mut end = 0;
        while let Some(&b) = rest.get(end) {
            match b {
                b'\n' => break,
                b'#' if rest[end - 1] == b' ' => break,
                b',' | b']' | b'}' if in_flow => break,
                b'[' | b'{' | b':' if in_flow => return None,
                b':' if matches!(rest.get(end + 1), None | Some(b' ' | b'\n')) => return None,
                _ => end += 1,
            }
        }
        let text = self.text[self.at..self.at + end].trim_end_matches(' ');
        self.at += text.len();
        resolve(text).map(|node| node.unwrap_or(Node::Str(Cow::Borrowed(text))))
    }

    /// Folded (`>`) or literal (`|`) text below a key or list entry at column `indent`: lines
    /// of one indentation, more than `indent`, without blank lines between them.
    fn text_block(&mut self, indent: usize) -> Option<Node<'t>> {
        let folded = self.peek()? == b'>';
        self.at += 1;
        self.end_of_line()?;
        let margin = spaces(self.rest());
        if margin <= indent {
            return None;
        }
        let mut lines = Vec::new();
        loop {
            let rest = self.rest();
            let indented = spaces(rest);
            match rest.get(indented) {
                None => break,
                Some(b'\n') => {
                    // Blank lines end the text only where a less indented line follows them,
                    // and only when no deeper than the text (libyaml keeps deeper spaces).
                    let mut after = rest.split(|&b| b == b'\n').skip_while(|line| spaces(line) == line.len());
                    let blank = rest.split(|&b| b == b'\n').take_while(|line| spaces(line) == line.len());
                    if blank.into_iter().any(|line| line.len() > margin)
                        || after.next().is_some_and(|line| spaces(line) >= margin)
                    {
                        return None;
                    }
                    break;
                }
                Some(_) if indented < margin => break,
                Some(_) if indented > margin => return None,
                Some(_) => {
                    let end = rest.iter().position(|&b| b == b'\n')?;
                    let line = &self.text[self.at + margin..self.at + end];
                    if line.ends_with(' ') {
                        return None;
                    }
                    lines.push(line);
                    self.at += end + 1;
                }
            }
        }
        (!lines.is_empty()).then(|| Node::Str(Cow::Owned(join(&lines, folded))))
    }
}

/// How many spaces `bytes` starts with.
fn spaces(bytes: &[u8]) -> usize {
    bytes.iter().take_while(|&&b| b == b' ').count()
}

/// The lines of a folded or literal text, joined, with its final line break.
fn join(lines: &[&str], folded: bool) -> String {
    let mut text = lines.join(if folded { " " } else { "\n" });
    text.push('\n');
    text
}

/// Whether a line goes on with a list entry: `- ...`, or a lone `-`.
fn entry(rest: &[u8]) -> bool {
    matches!(rest, [b'-', b' ' | b'\n', ..] | [b'-'])
}

/// The key a line goes on with (`name` of `name: ...`): letters, digits and `_./-`, from a
/// letter, followed by `:` and a space or the end of the line; not one that serde_yaml
/// reads as null or a boolean.
fn key(rest: &str) -> Option<&str> {
    let bytes = rest.as_bytes();
    if !bytes.first()?.is_ascii_alphabetic() {
        return None;
    }
    let len = bytes.iter().take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-')).count();
    if len > MAX_KEY || bytes.get(len) != Some(&b':') || !matches!(bytes.get(len + 1), None | Some(b' ' | b'\n')) {
        return None;
    }
    let name = &rest[..len];
    match resolve(name) {
        Some(None) => Some(name),
        _ => None,
    }
}

/// A mapping's entries, or `None` when two keys are alike (serde_yaml refuses them).
fn unique<'t>(entries: Vec<(Node<'t>, Node<'t>)>) -> Option<Vec<(Node<'t>, Node<'t>)>> {
    let duplicate = if entries.len() <= 16 {
        entries.iter().enumerate().any(|(i, (key, _))| entries[..i].iter().any(|(other, _)| other == key))
    } else {
        let mut keys: Vec<&Node> = entries.iter().map(|(key, _)| key).collect();
        keys.sort_by_key(|&key| key.as_str());
        keys.windows(2).any(|pair| pair[0] == pair[1])
    };
    (!duplicate).then_some(entries)
}

/// What a plain scalar means to serde_yaml: `Some(Some(node))` for null, a boolean or a whole
/// number, `Some(None)` for a string, `None` when this reader leaves it to serde_yaml (floats,
/// numbers in other bases or with a sign or leading zeros, numbers too large).
fn resolve(text: &str) -> Option<Option<Node<'static>>> {
    match text {
        "null" | "Null" | "NULL" | "~" => return Some(Some(Node::Null)),
        "true" | "True" | "TRUE" => return Some(Some(Node::Bool(true))),
        "false" | "False" | "FALSE" => return Some(Some(Node::Bool(false))),
        _ => {}
    }
    let bytes = text.as_bytes();
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        if digits.len() > 1 && digits[0] == b'0' {
            return None;
        }
        return match negative {
            false => text.parse::<u64>().ok().map(|n| Some(Node::Number(n.into()))),
            true => text.parse::<i64>().ok().filter(|&n| n < 0).map(|n| Some(Node::Number(n.into()))),
        };
    }
    match bytes.first()? {
        // Rust reads only infinities and NaN from text that starts with a letter, and
        // serde_yaml keeps only finite floats: such text is a string, like `~x`, `_x`, `/x`.
        b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'/' | b'~' | 0x80.. => Some(None),
        b'0'..=b'9' if !matches!(bytes, [b'0', b'x' | b'o' | b'b', ..]) && text.parse::<f64>().is_err() => Some(None),
        _ => None,
    }
}
