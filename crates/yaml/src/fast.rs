//! A byte-level reader for the block-style YAML that scores are written in.
//!
//! yaml-rust2 moves the text one `char` at a time through a look-ahead ring, builds a token
//! and an event for every scalar and pushes each scalar's characters one by one into fresh
//! `String`s: on the 516-sheet corpus score (345 KB) that was ~52 M instructions, the larger
//! part of `mozart validate`. This reader builds the [`Node`] tree straight from the bytes for
//! the subset real scores use — block mappings and sequences, plain, quoted and block scalars,
//! one-line flow collections of scalars, comments — with the same values, the same line and
//! column marks and the same resolution (it shares the builder's [`resolve_plain`],
//! [`KeyIndex`] and [`apply_merge`]). Whatever it is not sure of (anchors, aliases, tags,
//! tabs, `\r`, directives, document markers, empty values, multi-line flow collections,
//! anything yaml-rust2 would refuse) makes it give up, and the caller loads the
//! text with yaml-rust2, which stays the reference: every error message comes from there.
//! `tests/fast_reader.rs` checks both agree on every score and YAML file in the repository
//! and on mutations of them.

use crate::{apply_merge, resolve_plain, KeyIndex, Node, NodeKind, MAX_NODES};

/// The text leaves the subset this reader is sure of: load it with yaml-rust2.
pub(crate) struct Out;

type R<T> = Result<T, Out>;

/// Deeper nesting is left to yaml-rust2: the reader recurses once per level, and a score
/// may be loaded on a thread with a small stack.
const MAX_DEPTH: usize = 128;

use crate::dupes::Repeat;

/// The tree of `text` and the keys given twice in one of its mappings (line of the first,
/// line of the repeat), or `None` when it is not in the subset (the caller then uses
/// yaml-rust2).
pub(crate) fn parse(text: &str) -> Option<(Node, Vec<Repeat>)> {
    let s = text.as_bytes();
    if !plain_bytes(s) {
        return None;
    }
    let mut r = Reader {
        text,
        s,
        pos: 0,
        line: 1,
        line_start: 0,
        nodes: 0,
        depth: 0,
        repeats: Vec::new(),
    };
    let root = r.document().ok()?;
    Some((root, r.repeats))
}

/// No byte this reader leaves to yaml-rust2: control characters (tabs and `\r` included),
/// a byte-order mark anywhere, and `---`, `...` or `%` at the start of a line (documents and
/// directives).
fn plain_bytes(s: &[u8]) -> bool {
    // One branch-free pass over the text (the compiler vectorises it) finds whether any byte
    // needs a closer look: a control byte, DEL, or 0xEF (a byte-order mark starts with it).
    let suspect = s.iter().fold(false, |seen, &b| {
        seen | ((b < 0x20 && b != b'\n') | (b == 0x7f) | (b == 0xef))
    });
    if suspect
        && s.iter().enumerate().any(|(i, &b)| {
            (b < 0x20 && b != b'\n') || b == 0x7f || s[i..].starts_with(&[0xef, 0xbb, 0xbf])
        })
    {
        return false;
    }
    // Then the start of each line.
    let mut rest = s;
    loop {
        if rest.first() == Some(&b'%') || rest.starts_with(b"---") || rest.starts_with(b"...") {
            return false;
        }
        match rest.iter().position(|b| *b == b'\n') {
            Some(i) => rest = &rest[i + 1..],
            None => return true,
        }
    }
}

/// Whether `b` (0 at the end of the text) ends a token: a space, a line break or the end.
fn blank_or_end(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | 0)
}

fn is_flow(b: u8) -> bool {
    matches!(b, b',' | b'[' | b']' | b'{' | b'}')
}

/// Where a plain scalar's line ends.
#[derive(PartialEq)]
enum Stop {
    /// A line break or the end of the text.
    Eol,
    /// ` #`: a comment follows.
    Comment,
    /// `: ` or `:` at the end of the line: a mapping value follows.
    Colon,
}

struct Reader<'a> {
    text: &'a str,
    s: &'a [u8],
    pos: usize,
    /// 1-based line of `pos`.
    line: usize,
    /// Byte offset where `pos`'s line starts.
    line_start: usize,
    nodes: usize,
    /// Collections open around `pos`.
    depth: usize,
    /// Keys given twice in one mapping: (line of the first, line of the repeat).
    repeats: Vec<Repeat>,
}

impl Reader<'_> {
    fn peek(&self) -> u8 {
        self.s.get(self.pos).copied().unwrap_or(0)
    }

    fn peek_at(&self, ahead: usize) -> u8 {
        self.s.get(self.pos + ahead).copied().unwrap_or(0)
    }

    fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }

    /// 0-based column of `pos` in characters, as yaml-rust2 counts it.
    fn col(&self) -> usize {
        let prefix = &self.s[self.line_start..self.pos];
        if prefix.is_ascii() {
            prefix.len()
        } else {
            prefix.iter().filter(|b| (**b & 0xc0) != 0x80).count()
        }
    }

    /// The node's position as [`Node`] keeps it: 1-based line and column.
    fn mark(&self) -> (usize, usize) {
        (self.line, self.col() + 1)
    }

    /// Step over the `\n` at `pos`.
    fn newline(&mut self) {
        self.pos += 1;
        self.line += 1;
        self.line_start = self.pos;
    }

    fn node(&mut self, kind: NodeKind, (line, col): (usize, usize)) -> R<Node> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(Out);
        }
        Ok(Node { kind, line, col })
    }

    /// One more collection open; gives up past [`MAX_DEPTH`]. (A collection that gives up
    /// is not closed: the whole reading is abandoned then.)
    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Out);
        }
        Ok(())
    }

    fn skip_spaces(&mut self) -> bool {
        let from = self.pos;
        while self.peek() == b' ' {
            self.pos += 1;
        }
        self.pos > from
    }

    fn skip_comment(&mut self) {
        while !matches!(self.peek(), b'\n' | 0) {
            self.pos += 1;
        }
    }

    /// Skip spaces, comments and line breaks to the next content; its column, `None` at the end.
    fn next_content(&mut self) -> Option<usize> {
        loop {
            self.skip_spaces();
            match self.peek() {
                b'#' => self.skip_comment(),
                b'\n' => self.newline(),
                _ if self.at_end() => return None,
                _ => return Some(self.col()),
            }
        }
    }

    /// After a scalar or flow collection: only spaces and a comment may end its line.
    fn line_tail(&mut self) -> R<()> {
        let spaced = self.skip_spaces();
        match self.peek() {
            b'\n' | 0 => Ok(()),
            b'#' if spaced => {
                self.skip_comment();
                Ok(())
            }
            _ => Err(Out),
        }
    }

    /// A `- ` (or `-` ending its line) at `pos`.
    fn is_entry(&self) -> bool {
        self.peek() == b'-' && blank_or_end(self.peek_at(1))
    }

    fn document(&mut self) -> R<Node> {
        // An empty document and a scalar or flow root are left to yaml-rust2.
        if self.next_content() != Some(0) {
            return Err(Out);
        }
        let root = if self.is_entry() {
            self.block_seq(0, false)?
        } else {
            self.block_map(0)?
        };
        match self.next_content() {
            None => Ok(root),
            Some(_) => Err(Out),
        }
    }

    /// A block mapping whose first key is at `pos`, column `indent`.
    fn block_map(&mut self, indent: usize) -> R<Node> {
        self.enter()?;
        let mut entries = Vec::new();
        let mut index = KeyIndex::default();
        let mut mark = None;
        loop {
            let (key, colon) = self.key()?;
            // yaml-rust2 marks a block mapping where its first `:` is.
            mark.get_or_insert(colon);
            let value = self.after_indicator(indent, true)?;
            if let Some(repeat) = index.insert(&mut entries, key, value) {
                self.repeats.push(repeat);
            }
            match self.next_content() {
                None => break,
                Some(c) if c < indent => break,
                Some(c) if c == indent && !self.is_entry() => {}
                Some(_) => return Err(Out),
            }
        }
        let entries = apply_merge(entries).map_err(|_| Out)?;
        self.depth -= 1;
        self.node(NodeKind::Map(entries), mark.ok_or(Out)?)
    }

    /// A block sequence whose first `-` is at `pos`, column `indent`; `indentless` when it is
    /// a mapping value at the mapping's own column (a key at that column then ends it).
    fn block_seq(&mut self, indent: usize, indentless: bool) -> R<Node> {
        self.enter()?;
        let mut mark = self.mark();
        let mut items = Vec::new();
        loop {
            self.pos += 1; // the `-`
            if indentless && items.is_empty() {
                // yaml-rust2 marks an indentless sequence where its first entry's content
                // starts (or where that line ends).
                self.skip_spaces();
                if self.peek() == b'#' {
                    self.skip_comment();
                }
                mark = self.mark();
            }
            items.push(self.after_indicator(indent, false)?);
            match self.next_content() {
                None => break,
                Some(c) if c < indent => break,
                Some(c) if c == indent && self.is_entry() => {}
                Some(c) if c == indent && indentless => break,
                Some(_) => return Err(Out),
            }
        }
        self.depth -= 1;
        self.node(NodeKind::Seq(items), mark)
    }

    /// The value after a mapping's `:` or a sequence's `-` (at `pos`) of a block collection
    /// at column `indent`.
    fn after_indicator(&mut self, indent: usize, in_map: bool) -> R<Node> {
        self.skip_spaces();
        match self.peek() {
            b'\n' | b'#' | 0 => self.value_below(indent, in_map),
            _ if !in_map && self.is_entry() => Err(Out),
            _ if !in_map && self.key_follows() => {
                let col = self.col();
                self.block_map(col)
            }
            _ => self.inline_value(indent),
        }
    }

    /// A value that starts on a later line than its key or `-`.
    fn value_below(&mut self, indent: usize, in_map: bool) -> R<Node> {
        match self.next_content() {
            Some(c) if c > indent && self.is_entry() => self.block_seq(c, false),
            Some(c) if c > indent && self.key_follows() => self.block_map(c),
            Some(c) if c == indent && in_map && self.is_entry() => self.block_seq(c, true),
            // Empty values and scalars on their own line: yaml-rust2 marks them in ways not
            // worth copying here.
            _ => Err(Out),
        }
    }

    /// Whether a simple key (a one-line scalar and `: `) starts at `pos`: read as `key`
    /// reads it, without building anything.
    fn key_follows(&self) -> bool {
        let rest = &self.s[self.pos..];
        let at = |i: usize| rest.get(i).copied().unwrap_or(0);
        let mut i = 0;
        if matches!(at(0), b'[' | b'{') {
            // A flow collection; as a key (`[a]: b`) it is yaml-rust2's anyway.
            return false;
        }
        if let q @ (b'\'' | b'"') = at(0) {
            i = 1;
            loop {
                match at(i) {
                    b'\n' | 0 => return false,
                    b'\'' if q == b'\'' && at(i + 1) == b'\'' => i += 2,
                    b if b == q => break,
                    _ => i += 1,
                }
            }
            i += 1;
            while at(i) == b' ' {
                i += 1;
            }
            return at(i) == b':' && blank_or_end(at(i + 1));
        }
        loop {
            match at(i) {
                b'\n' | 0 => return false,
                b':' if blank_or_end(at(i + 1)) => return true,
                b' ' if at(i + 1) == b'#' => return false,
                _ => i += 1,
            }
        }
    }

    /// A key at `pos` and its `:` (consumed); the key's node and the `:`'s mark.
    fn key(&mut self) -> R<(Node, (usize, usize))> {
        let mark = self.mark();
        let line = self.line;
        let kind = match self.peek() {
            q @ (b'\'' | b'"') => {
                let text = self.quoted(q == b'\'', usize::MAX)?;
                if self.line != line {
                    return Err(Out);
                }
                self.skip_spaces();
                NodeKind::Str(text)
            }
            first => {
                if starts_indicator(first, self.peek_at(1)) {
                    return Err(Out);
                }
                let start = self.pos;
                let (end, stop) = self.plain_line();
                if stop != Stop::Colon {
                    return Err(Out);
                }
                resolve_plain(self.text[start..end].to_string())
            }
        };
        // A simple key is at most 1024 characters long in yaml-rust2.
        if self.pos - self.line_start > 1000
            || self.peek() != b':'
            || !blank_or_end(self.peek_at(1))
        {
            return Err(Out);
        }
        let colon = self.mark();
        self.pos += 1;
        Ok((self.node(kind, mark)?, colon))
    }

    /// A value starting on the line of its key or `-`, at `pos`.
    fn inline_value(&mut self, indent: usize) -> R<Node> {
        let mark = self.mark();
        let kind = match self.peek() {
            q @ (b'\'' | b'"') => {
                let text = self.quoted(q == b'\'', indent)?;
                self.line_tail()?;
                NodeKind::Str(text)
            }
            b'|' | b'>' => return self.block_scalar(indent),
            b'[' | b'{' => {
                let node = self.flow()?;
                self.line_tail()?;
                return Ok(node);
            }
            first if starts_indicator(first, self.peek_at(1)) => return Err(Out),
            _ => resolve_plain(self.plain_value(indent)?),
        };
        self.node(kind, mark)
    }

    /// Scan a plain scalar's line from `pos` (block context): where its text ends and why.
    /// `pos` is left on the stop (the line break or the end, the ` #`'s `#`, or the `:`).
    fn plain_line(&mut self) -> (usize, Stop) {
        let mut end = self.pos;
        loop {
            match self.peek() {
                // 0 is the end of the text: `plain_bytes` refused NUL bytes.
                b'\n' | 0 => return (end, Stop::Eol),
                b':' if blank_or_end(self.peek_at(1)) => return (end, Stop::Colon),
                b' ' => {
                    self.pos += 1;
                    if self.peek() == b'#' {
                        return (end, Stop::Comment);
                    }
                }
                _ => {
                    self.pos += 1;
                    end = self.pos;
                }
            }
        }
    }

    /// A plain scalar value in a block collection at column `indent`, with its continuation
    /// lines folded.
    fn plain_value(&mut self, indent: usize) -> R<String> {
        let start = self.pos;
        let (end, stop) = self.plain_line();
        match stop {
            Stop::Colon => return Err(Out),
            Stop::Comment => {
                self.skip_comment();
                return Ok(self.text[start..end].to_string());
            }
            Stop::Eol => {}
        }
        let mut text = self.text[start..end].to_string();
        while !self.at_end() {
            let breaks = self.skip_breaks();
            // The scalar ends at the end, at a line not indented past its collection, and
            // at a comment.
            if self.at_end() || self.pos - self.line_start <= indent || self.peek() == b'#' {
                break;
            }
            fold(&mut text, breaks);
            let from = self.pos;
            let (end, stop) = self.plain_line();
            text.push_str(&self.text[from..end]);
            match stop {
                Stop::Colon => return Err(Out),
                Stop::Comment => {
                    self.skip_comment();
                    break;
                }
                Stop::Eol => {}
            }
        }
        Ok(text)
    }

    /// A single- or double-quoted scalar at `pos`; its continuation lines must be indented
    /// past `indent` (`usize::MAX`: it must end on its line). `pos` is left after the
    /// closing quote.
    fn quoted(&mut self, single: bool, indent: usize) -> R<String> {
        let quote = if single { b'\'' } else { b'"' };
        self.pos += 1;
        let mut text = String::new();
        let mut from = self.pos;
        loop {
            match self.peek() {
                b'\n' => {
                    // Spaces before a break are dropped, and so is the next line's indentation;
                    // one break folds into a space, n + 1 breaks into n newlines.
                    text.push_str(self.text[from..self.pos].trim_end_matches(' '));
                    let breaks = self.skip_breaks();
                    if self.at_end() || indent == usize::MAX || self.pos - self.line_start <= indent
                    {
                        return Err(Out);
                    }
                    fold(&mut text, breaks);
                    from = self.pos;
                }
                // Unterminated, or an escape (double quotes): yaml-rust2 words the error or
                // decodes the escape.
                0 if self.at_end() => return Err(Out),
                b'\\' if !single => {
                    text.push_str(&self.text[from..self.pos]);
                    self.escape(&mut text, indent)?;
                    from = self.pos;
                }
                b if b == quote => {
                    text.push_str(&self.text[from..self.pos]);
                    if single && self.peek_at(1) == b'\'' {
                        text.push('\'');
                        self.pos += 2;
                        from = self.pos;
                    } else {
                        self.pos += 1;
                        return Ok(text);
                    }
                }
                _ => self.pos += 1,
            }
        }
    }

    /// The escape at `pos` (a `\\` in double quotes), decoded as yaml-rust2 decodes it; an
    /// escaped line break joins the lines without a space.
    fn escape(&mut self, text: &mut String, indent: usize) -> R<()> {
        let simple = match self.peek_at(1) {
            b'\n' => {
                self.pos += 1;
                let breaks = self.skip_breaks();
                if self.at_end() || indent == usize::MAX || self.pos - self.line_start <= indent {
                    return Err(Out);
                }
                text.extend(std::iter::repeat_n('\n', breaks));
                return Ok(());
            }
            b'0' => '\0',
            b'a' => '\x07',
            b'b' => '\x08',
            b't' => '\t',
            b'n' => '\n',
            b'v' => '\x0b',
            b'f' => '\x0c',
            b'r' => '\r',
            b'e' => '\x1b',
            b' ' => ' ',
            b'"' => '"',
            b'/' => '/',
            b'\\' => '\\',
            b'N' => '\u{85}',
            b'_' => '\u{a0}',
            b'L' => '\u{2028}',
            b'P' => '\u{2029}',
            b'x' | b'u' | b'U' => {
                let len = match self.peek_at(1) {
                    b'x' => 2,
                    b'u' => 4,
                    _ => 8,
                };
                let digits = self.s.get(self.pos + 2..self.pos + 2 + len).ok_or(Out)?;
                if !digits.iter().all(u8::is_ascii_hexdigit) {
                    return Err(Out);
                }
                let code = std::str::from_utf8(digits)
                    .ok()
                    .and_then(|d| u32::from_str_radix(d, 16).ok())
                    .and_then(char::from_u32)
                    .ok_or(Out)?;
                text.push(code);
                self.pos += 2 + len;
                return Ok(());
            }
            // Unknown escapes are yaml-rust2's to word.
            _ => return Err(Out),
        };
        text.push(simple);
        self.pos += 2;
        Ok(())
    }

    /// At a line break: step over it, the empty lines after it and the next line's
    /// indentation; how many empty lines there were.
    fn skip_breaks(&mut self) -> usize {
        self.newline();
        let mut breaks = 0;
        loop {
            self.skip_spaces();
            if self.peek() != b'\n' {
                return breaks;
            }
            breaks += 1;
            self.newline();
        }
    }

    /// A block scalar (`|` or `>`, at `pos`) in a block collection at column `indent`.
    fn block_scalar(&mut self, indent: usize) -> R<Node> {
        let header = self.mark();
        let literal = self.peek() == b'|';
        self.pos += 1;
        let chomping = |b: u8| match b {
            b'+' => Some(Chomp::Keep),
            b'-' => Some(Chomp::Strip),
            _ => None,
        };
        let mut chomp = Chomp::Clip;
        let mut increment = 0;
        if let Some(c) = chomping(self.peek()) {
            chomp = c;
            self.pos += 1;
            if self.peek().is_ascii_digit() {
                if self.peek() == b'0' {
                    return Err(Out); // an indentation indicator of 0 is an error
                }
                increment = usize::from(self.peek() - b'0');
                self.pos += 1;
            }
        } else if self.peek().is_ascii_digit() {
            if self.peek() == b'0' {
                return Err(Out);
            }
            increment = usize::from(self.peek() - b'0');
            self.pos += 1;
            if let Some(c) = chomping(self.peek()) {
                chomp = c;
                self.pos += 1;
            }
        }
        self.line_tail()?;
        if self.at_end() {
            return Err(Out);
        }
        self.newline();
        // `trailing`: empty lines not yet added to the text.
        let mut trailing = 0;
        let block_indent = if increment > 0 {
            let block_indent = indent + increment;
            self.skip_block_indent(block_indent, &mut trailing);
            block_indent
        } else {
            // The indentation is the first content line's, or the longest empty line's before it.
            let mut longest = 0;
            loop {
                self.skip_spaces();
                longest = longest.max(self.pos - self.line_start);
                if self.peek() != b'\n' {
                    break;
                }
                trailing += 1;
                self.newline();
            }
            longest.max(indent + 1)
        };
        if self.at_end() {
            let text = match chomp {
                Chomp::Strip => String::new(),
                Chomp::Clip => "\n".to_string(),
                Chomp::Keep => "\n".repeat(trailing.max(1)),
            };
            return self.node(NodeKind::Str(text), header);
        }
        let mut col = self.pos - self.line_start;
        if col < block_indent && col > indent {
            return Err(Out);
        }
        let mark = self.mark();
        let mut text = String::new();
        let mut leading_break = false;
        let mut leading_blank = false;
        while col == block_indent && !self.at_end() {
            let trailing_blank = self.peek() == b' ';
            if !literal && leading_break && !leading_blank && !trailing_blank {
                fold(&mut text, trailing);
            } else {
                if leading_break {
                    text.push('\n');
                }
                text.extend(std::iter::repeat_n('\n', trailing));
            }
            leading_break = false;
            trailing = 0;
            leading_blank = trailing_blank;
            let from = self.pos;
            self.pos = match self.s[from..].iter().position(|b| *b == b'\n') {
                Some(n) => from + n,
                None => self.s.len(),
            };
            text.push_str(&self.text[from..self.pos]);
            if self.at_end() {
                break;
            }
            self.newline();
            leading_break = true;
            self.skip_block_indent(block_indent, &mut trailing);
            col = self.pos - self.line_start;
        }
        if chomp != Chomp::Strip {
            if leading_break {
                text.push('\n');
            }
            if self.at_end() && self.col() >= block_indent.max(1) {
                text.push('\n');
            }
        }
        if chomp == Chomp::Keep {
            text.extend(std::iter::repeat_n('\n', trailing));
        }
        self.node(NodeKind::Str(text), mark)
    }

    /// Step over a block scalar's indentation (up to `indent` spaces) and its empty lines.
    fn skip_block_indent(&mut self, indent: usize, trailing: &mut usize) {
        loop {
            while self.pos - self.line_start < indent && self.peek() == b' ' {
                self.pos += 1;
            }
            if self.peek() != b'\n' {
                return;
            }
            *trailing += 1;
            self.newline();
        }
    }

    /// A one-line flow sequence or mapping of scalars (and of more such collections) at `pos`.
    fn flow(&mut self) -> R<Node> {
        self.enter()?;
        let mark = self.mark();
        let map = self.peek() == b'{';
        let close = if map { b'}' } else { b']' };
        self.pos += 1;
        self.skip_spaces();
        let mut items = Vec::new();
        let mut entries = Vec::new();
        let mut index = KeyIndex::default();
        if self.peek() != close {
            loop {
                if map {
                    let key = self.flow_scalar(true)?;
                    if self.peek() != b':' || self.peek_at(1) != b' ' {
                        return Err(Out);
                    }
                    self.pos += 1;
                    self.skip_spaces();
                    let value = self.flow_item()?;
                    if let Some(repeat) = index.insert(&mut entries, key, value) {
                        self.repeats.push(repeat);
                    }
                } else {
                    items.push(self.flow_item()?);
                }
                self.skip_spaces();
                match self.peek() {
                    b',' => {
                        self.pos += 1;
                        self.skip_spaces();
                        // Empty entries and a trailing comma are yaml-rust2's.
                        if self.peek() == close || self.peek() == b',' {
                            return Err(Out);
                        }
                    }
                    b if b == close => break,
                    _ => return Err(Out),
                }
            }
        }
        self.pos += 1;
        let kind = if map {
            NodeKind::Map(apply_merge(entries).map_err(|_| Out)?)
        } else {
            NodeKind::Seq(items)
        };
        self.depth -= 1;
        self.node(kind, mark)
    }

    fn flow_item(&mut self) -> R<Node> {
        match self.peek() {
            b'[' | b'{' => self.flow(),
            _ => self.flow_scalar(false),
        }
    }

    /// A scalar in a flow collection, on one line; a `key` stops at `: `.
    fn flow_scalar(&mut self, key: bool) -> R<Node> {
        let mark = self.mark();
        let kind = match self.peek() {
            q @ (b'\'' | b'"') => NodeKind::Str(self.quoted(q == b'\'', usize::MAX)?),
            first => {
                let next = self.peek_at(1);
                if starts_indicator(first, next)
                    || matches!(first, b'?' | b':')
                    || (first == b'-' && is_flow(next))
                {
                    return Err(Out);
                }
                let start = self.pos;
                let mut end = start;
                loop {
                    match self.peek() {
                        b',' | b'[' | b']' | b'{' | b'}' => break,
                        b':' if key && self.peek_at(1) == b' ' => break,
                        // A break (several lines), the end, a comment, a `:` anywhere else.
                        b'\n' | 0 | b'#' | b':' => return Err(Out),
                        b' ' => self.pos += 1,
                        _ => {
                            self.pos += 1;
                            end = self.pos;
                        }
                    }
                }
                resolve_plain(self.text[start..end].to_string())
            }
        };
        self.node(kind, mark)
    }
}

/// Block scalar chomping: what happens to the final line break and trailing empty lines.
#[derive(PartialEq)]
enum Chomp {
    Strip,
    Clip,
    Keep,
}

/// Fold a line break followed by `breaks` empty lines: a space, or `breaks` newlines.
fn fold(text: &mut String, breaks: usize) {
    if breaks == 0 {
        text.push(' ');
    } else {
        text.extend(std::iter::repeat_n('\n', breaks));
    }
}

/// Whether a scalar cannot start with `first` (followed by `next`) in the subset: indicators
/// of anchors, tags, flow collections, comments, reserved characters, and `-`, `?`, `:`
/// followed by a blank.
fn starts_indicator(first: u8, next: u8) -> bool {
    match first {
        b'[' | b']' | b'{' | b'}' | b',' | b'#' | b'&' | b'*' | b'!' | b'|' | b'>' | b'\''
        | b'"' | b'%' | b'@' | b'`' => true,
        b'-' | b'?' | b':' => blank_or_end(next),
        _ => false,
    }
}
