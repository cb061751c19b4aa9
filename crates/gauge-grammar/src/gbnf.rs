//! GBNF (llama.cpp's grammar format, `grammars/README.md`) translated to llguidance's Lark
//! dialect, so llama-server's `grammar` field keeps its meaning.
//!
//! The reader follows llama.cpp's own parser (`llama-grammar.cpp`) construct by construct: rules
//! `name ::= ...` end at the end of their line (a line may continue after `|`, `::=` or inside
//! parentheses); names are `[a-zA-Z0-9-]+`; `root` is the start; `#` starts a comment; literals
//! `"..."` and classes `[...]` (`^` negates, `a-z` ranges) take the escapes `\x` `\u` `\U` `\t`
//! `\n` `\r` `\\` `\"` `\[` `\]` `\-`; `.` is any character; `* + ? {m} {m,} {m,n}` repeat the
//! item before them; `<[id]>` / `!<[id]>` are a token id and any token but it, `<name>` a special
//! token.
//!
//! # Why every terminal is one character
//!
//! GBNF matches characters; llguidance's Lark has a lexer whose terminals are *greedy* (a
//! terminal that can be extended by the next byte is extended). A multi-character terminal would
//! change meaning wherever it is a prefix of what may follow (`[0-9]+ [0-9]` would reject "12").
//! So each literal character and each class is its own one-character terminal: one character
//! can never extend another, the lexer has nothing to decide, and the Earley parser does exactly
//! what llama.cpp's stack machine does. The cost is a parser step per character.
//!
//! Differences from llama.cpp, all refusals rather than changes of meaning: a rule defined twice
//! (llama.cpp keeps the last), an empty class `[]` (llama.cpp reads it as nothing at all), a
//! reversed range `[z-a]`, a codepoint that is not a Unicode scalar value, and `!<name>` (write
//! `!<[id]>`). Left recursion, which llama.cpp refuses, is accepted (Earley parses it).
//! Like llama.cpp, `{m,n}` with `n` above 2000 has no upper bound and `m` above 2000 is refused.

use std::collections::BTreeMap;
use std::fmt;

/// The largest repetition count llama.cpp accepts (`MAX_REPETITION_THRESHOLD`).
const MAX_REPETITION: u64 = 2000;
/// Parentheses nested deeper than this are refused (the reader recurses on them).
const MAX_NESTING: usize = 256;
/// The Lark rule the translation starts at (GBNF's `root`).
const START: &str = "start";

/// A GBNF text that cannot be read, with where and in which rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GbnfError {
    /// 1-based line and column (in characters) of the problem.
    pub line: usize,
    pub column: usize,
    /// The rule being read, if any.
    pub rule: Option<String>,
    pub message: String,
}

impl fmt::Display for GbnfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GBNF line {}, column {}", self.line, self.column)?;
        if let Some(r) = &self.rule {
            write!(f, " (rule `{r}`)")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for GbnfError {}

/// Does this grammar text use llama.cpp's marker for an llguidance (Lark) grammar?
pub fn is_llguidance_lark(text: &str) -> bool {
    text.trim_start().starts_with("%llguidance")
}

/// vLLM's rule for `guided_grammar` (`grammar_is_likely_lark`): GBNF/EBNF when some line,
/// comments removed, defines a rule with `::=`; Lark otherwise.
pub fn looks_like_gbnf(text: &str) -> bool {
    text.lines().any(|line| {
        let cut = [line.find('#'), line.find("//")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(line.len());
        line[..cut].contains("::=")
    })
}

/// Translate a GBNF grammar into llguidance's Lark dialect (start rule `start` = GBNF `root`).
pub fn gbnf_to_lark(src: &str) -> Result<String, GbnfError> {
    let mut r = Reader {
        src,
        pos: 0,
        rule: None,
        depth: 0,
        refs: Vec::new(),
    };
    let mut rules: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    r.space(true);
    while !r.eof() {
        let (name, line, body) = r.rule()?;
        if let Some((first, _)) = rules.get(&name) {
            return Err(r.err_at(
                line,
                1,
                format!("rule `{name}` is defined twice (first on line {first}); rename one"),
            ));
        }
        rules.insert(name.clone(), (line, body));
        order.push(name);
    }
    for (name, line, column, in_rule) in &r.refs {
        if !rules.contains_key(name) {
            return Err(GbnfError {
                line: *line,
                column: *column,
                rule: Some(in_rule.clone()),
                message: format!("rule `{name}` is used but never defined"),
            });
        }
    }
    if !rules.contains_key("root") {
        return Err(GbnfError {
            line: 1,
            column: 1,
            rule: None,
            message: "no `root` rule: a GBNF grammar starts at `root ::= ...`".into(),
        });
    }
    let mut out = String::from("// translated from GBNF by gauge-grammar\n");
    out.push_str(&format!("{START}: {}\n", lark_rule_name("root")));
    for name in &order {
        let (_, body) = &rules[name];
        out.push_str(&format!("{}: {body}\n", lark_rule_name(name)));
    }
    Ok(out)
}

/// A GBNF rule name as a Lark rule name: lowercase, so Lark reads a rule (not a terminal), and
/// prefixed so names starting with a digit or `-`, or named `start`, are valid and distinct.
/// Uppercase letters become `_` + the lowercase letter (GBNF names have no `_`, so no clashes).
fn lark_rule_name(name: &str) -> String {
    let mut s = String::from("g_");
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// A one-character Lark literal (JSON string syntax, which Lark's lexer requires: no raw
/// control characters or DEL).
fn lark_char(c: char) -> String {
    let mut s = String::from("\"");
    match c {
        '"' => s.push_str("\\\""),
        '\\' => s.push_str("\\\\"),
        c if (c as u32) < 0x20 || c as u32 == 0x7f => s.push_str(&format!("\\u{:04x}", c as u32)),
        c => s.push(c),
    }
    s.push('"');
    s
}

/// A character inside a regex class: ASCII letters and digits as they are, everything else as
/// `\x{...}` (so no `/`, `]`, `-` or `^` can end or change the class).
fn regex_char(c: char) -> String {
    if c.is_ascii_alphanumeric() {
        c.to_string()
    } else {
        format!("\\x{{{:x}}}", c as u32)
    }
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// One item of a sequence, as Lark text, and whether a repetition may follow it.
struct Item {
    text: String,
    repeatable: bool,
}

struct Reader<'a> {
    src: &'a str,
    /// Byte offset of the next character.
    pos: usize,
    rule: Option<String>,
    depth: usize,
    /// Rule references: name, line, column, the rule they appear in.
    refs: Vec<(String, usize, usize, String)>,
}

impl Reader<'_> {
    fn eof(&self) -> bool {
        self.pos >= self.src.len()
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        self.src[self.pos..].chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn line_col(&self, pos: usize) -> (usize, usize) {
        let before = &self.src[..pos];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    fn err_at(&self, line: usize, column: usize, message: String) -> GbnfError {
        GbnfError {
            line,
            column,
            rule: self.rule.clone(),
            message,
        }
    }

    fn err(&self, pos: usize, message: impl Into<String>) -> GbnfError {
        let (line, column) = self.line_col(pos);
        self.err_at(line, column, message.into())
    }

    /// What is at `pos`, for messages.
    fn found(&self) -> String {
        match self.peek() {
            None => "the end of the grammar".into(),
            Some('\n') | Some('\r') => "the end of the line".into(),
            Some(c) => format!("`{c}`"),
        }
    }

    /// Blanks and `#` comments; newlines too when `newline_ok` (llama.cpp's `parse_space`).
    fn space(&mut self, newline_ok: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newline_ok => self.pos += 1,
                '#' => {
                    while let Some(c) = self.peek() {
                        if c == '\r' || c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<String, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word_char) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err(
                start,
                format!(
                    "expected a rule name (letters, digits, `-`), found {}",
                    self.found()
                ),
            ));
        }
        Ok(self.src[start..self.pos].to_string())
    }

    /// `name ::= alternates` and the end of its line. Returns name, line and Lark body.
    fn rule(&mut self) -> Result<(String, usize, String), GbnfError> {
        self.rule = None;
        let start = self.pos;
        let name = self.name()?;
        self.rule = Some(name.clone());
        let line = self.line_col(start).0;
        self.space(false);
        if !self.src[self.pos..].starts_with("::=") {
            return Err(self.err(
                self.pos,
                format!("expected `::=` after the rule name, found {}", self.found()),
            ));
        }
        self.pos += 3;
        self.space(true);
        let body = self.alternates(false)?;
        match self.peek() {
            None => {}
            Some('\n') => self.pos += 1,
            Some('\r') => {
                self.pos += 1;
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
            }
            Some(c) => {
                let hint = if c == ')' {
                    "a `)` without its `(`".to_string()
                } else {
                    format!(
                        "unexpected `{c}` (a rule ends at the end of its line; continue it after \
                         `|` or inside parentheses)"
                    )
                };
                return Err(self.err(self.pos, hint));
            }
        }
        self.space(true);
        Ok((name, line, body))
    }

    fn alternates(&mut self, nested: bool) -> Result<String, GbnfError> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(alts.join(" | "))
    }

    fn sequence(&mut self, nested: bool) -> Result<String, GbnfError> {
        let mut items: Vec<Item> = Vec::new();
        while let Some(c) = self.peek() {
            let at = self.pos;
            match c {
                '"' => items.push(self.literal()?),
                '[' => items.push(self.class()?),
                '<' | '!' => items.push(self.token()?),
                '(' => {
                    self.pos += 1;
                    self.depth += 1;
                    if self.depth > MAX_NESTING {
                        return Err(self.err(at, "parentheses nested too deeply"));
                    }
                    self.space(true);
                    let inner = self.alternates(true)?;
                    self.depth -= 1;
                    if self.peek() != Some(')') {
                        let (l, col) = self.line_col(at);
                        return Err(self.err(
                            self.pos,
                            format!(
                                "expected `)` to close the `(` at line {l}, column {col}, found {}",
                                self.found()
                            ),
                        ));
                    }
                    self.pos += 1;
                    items.push(Item {
                        text: format!("({inner})"),
                        repeatable: true,
                    });
                }
                '.' => {
                    self.pos += 1;
                    items.push(Item {
                        text: r"/[\x{0}-\x{10ffff}]/".into(),
                        repeatable: true,
                    });
                }
                '*' | '+' | '?' => {
                    self.pos += 1;
                    let (min, max) = match c {
                        '*' => (0, None),
                        '+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    self.repeat(&mut items, at, c.to_string(), min, max)?;
                }
                '{' => {
                    let (min, max) = self.braces()?;
                    let what = self.src[at..self.pos].to_string();
                    self.repeat(&mut items, at, what, min, max)?;
                }
                c if is_word_char(c) => {
                    let (line, column) = self.line_col(at);
                    let name = self.name()?;
                    let in_rule = self.rule.clone().unwrap_or_default();
                    self.refs.push((name.clone(), line, column, in_rule));
                    items.push(Item {
                        text: lark_rule_name(&name),
                        repeatable: true,
                    });
                }
                _ => break,
            }
            self.space(nested);
        }
        let texts: Vec<&str> = items
            .iter()
            .map(|i| i.text.as_str())
            .filter(|t| *t != "\"\"")
            .collect();
        Ok(if texts.is_empty() {
            "\"\"".into()
        } else {
            texts.join(" ")
        })
    }

    /// Apply a repetition to the last item.
    fn repeat(
        &self,
        items: &mut [Item],
        at: usize,
        what: String,
        min: u64,
        max: Option<u64>,
    ) -> Result<(), GbnfError> {
        let Some(last) = items.last_mut().filter(|i| i.repeatable) else {
            return Err(self.err(at, format!("`{what}` has no item before it to repeat")));
        };
        let t = &last.text;
        last.text = match (min, max) {
            (0, Some(0)) => "\"\"".into(),
            (0, None) => format!("({t})*"),
            (1, None) => format!("({t})+"),
            (0, Some(1)) => format!("({t})?"),
            (m, None) => format!("({t}){{{m},}}"),
            (m, Some(n)) if m == n => format!("({t}){{{m}}}"),
            (m, Some(n)) => format!("({t}){{{m},{n}}}"),
        };
        last.repeatable = last.text != "\"\"";
        Ok(())
    }

    /// `{m}`, `{m,}` or `{m,n}` (llama.cpp: `m` at most 2000; `n` above 2000 means no bound).
    fn braces(&mut self) -> Result<(u64, Option<u64>), GbnfError> {
        let open = self.pos;
        self.pos += 1;
        self.space(true);
        let min = self.int("`{` (a repetition count)")?;
        self.space(true);
        let max = match self.bump() {
            Some('}') => Some(min),
            Some(',') => {
                self.space(true);
                let max = if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    Some(self.int("`,`")?)
                } else {
                    None
                };
                self.space(true);
                if self.bump() != Some('}') {
                    return Err(self.err(
                        self.pos.saturating_sub(1),
                        "expected `}` to close the repetition",
                    ));
                }
                max
            }
            _ => {
                return Err(self.err(
                    self.pos.saturating_sub(1),
                    "expected `}` or `,` in the repetition",
                ))
            }
        };
        if min > MAX_REPETITION {
            return Err(self.err(
                open,
                format!(
                    "a repetition of at least {min} exceeds llama.cpp's limit of {MAX_REPETITION}"
                ),
            ));
        }
        let max = max.filter(|&n| n <= MAX_REPETITION);
        if let Some(n) = max {
            if n < min {
                return Err(self.err(
                    open,
                    format!("repetition {{{min},{n}}}: the maximum is below the minimum"),
                ));
            }
        }
        Ok((min, max))
    }

    fn int(&mut self, after: &str) -> Result<u64, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err(
                start,
                format!("expected a number after {after}, found {}", self.found()),
            ));
        }
        self.src[start..self.pos]
            .parse()
            .map_err(|_| self.err(start, "the number is too large"))
    }

    /// One character of a literal or class, with its escape (llama.cpp's `parse_char`).
    fn char(&mut self) -> Result<char, GbnfError> {
        let at = self.pos;
        let c = self
            .bump()
            .ok_or_else(|| self.err(at, "unexpected end of the grammar"))?;
        if c != '\\' {
            return Ok(c);
        }
        let e = self
            .bump()
            .ok_or_else(|| self.err(at, "unexpected end of the grammar after `\\`"))?;
        let digits = match e {
            't' => return Ok('\t'),
            'r' => return Ok('\r'),
            'n' => return Ok('\n'),
            '\\' | '"' | '[' | ']' | '-' => return Ok(e),
            'x' => 2,
            'u' => 4,
            'U' => 8,
            _ => {
                return Err(self.err(
                    at,
                    format!(
                    "unknown escape `\\{e}` (known: \\x \\u \\U \\t \\n \\r \\\\ \\\" \\[ \\] \\-)"
                ),
                ))
            }
        };
        let hex: String = self.src[self.pos..].chars().take(digits).collect();
        if hex.len() != digits || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(self.err(at, format!("`\\{e}` needs exactly {digits} hex digits")));
        }
        self.pos += digits;
        let v = u32::from_str_radix(&hex, 16).expect("checked hex digits");
        char::from_u32(v)
            .ok_or_else(|| self.err(at, format!("`\\{e}{hex}` is not a Unicode character")))
    }

    fn literal(&mut self) -> Result<Item, GbnfError> {
        let open = self.pos;
        self.pos += 1;
        let mut chars = Vec::new();
        loop {
            match self.peek() {
                None => {
                    return Err(self.err(open, "the string literal is not closed (missing `\"`)"))
                }
                Some('"') => break,
                _ => chars.push(self.char()?),
            }
        }
        self.pos += 1;
        let text = match chars.len() {
            0 => "\"\"".to_string(),
            1 => lark_char(chars[0]),
            _ => format!(
                "({})",
                chars
                    .iter()
                    .map(|&c| lark_char(c))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        };
        Ok(Item {
            repeatable: !chars.is_empty(),
            text,
        })
    }

    fn class(&mut self) -> Result<Item, GbnfError> {
        let open = self.pos;
        self.pos += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut body = String::new();
        loop {
            match self.peek() {
                None => {
                    return Err(self.err(open, "the character class is not closed (missing `]`)"))
                }
                Some(']') => break,
                _ => {}
            }
            let lo = self.char()?;
            if self.peek() == Some('-') && self.peek2().is_some_and(|c| c != ']') {
                self.pos += 1;
                let hi = self.char()?;
                if hi < lo {
                    return Err(self.err(
                        open,
                        format!(
                            "the range `{}-{}` is reversed",
                            lo.escape_default(),
                            hi.escape_default()
                        ),
                    ));
                }
                body.push_str(&format!("{}-{}", regex_char(lo), regex_char(hi)));
            } else {
                body.push_str(&regex_char(lo));
            }
        }
        self.pos += 1;
        if body.is_empty() {
            return Err(self.err(
                open,
                "an empty character class (`[]` or `[^]`) matches no character",
            ));
        }
        let neg = if negated { "^" } else { "" };
        Ok(Item {
            text: format!("/[{neg}{body}]/"),
            repeatable: true,
        })
    }

    /// `<[id]>`, `!<[id]>` or `<name>` (a special token by its text).
    fn token(&mut self) -> Result<Item, GbnfError> {
        let at = self.pos;
        let negated = self.peek() == Some('!');
        if negated {
            self.pos += 1;
        }
        if self.peek() != Some('<') {
            return Err(self.err(
                self.pos,
                format!("expected `<` after `!`, found {}", self.found()),
            ));
        }
        let end = self.src[self.pos..]
            .find('>')
            .map(|i| self.pos + i)
            .ok_or_else(|| self.err(at, "the token is not closed (missing `>`)"))?;
        let inner = &self.src[self.pos + 1..end];
        let text = if let Some(id) = inner.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            let id: u32 = id
                .parse()
                .map_err(|_| self.err(at, format!("`<[{id}]>`: a token id is a number")))?;
            if negated {
                format!("<[^{id}]>")
            } else {
                format!("<[{id}]>")
            }
        } else if negated {
            return Err(self.err(
                at,
                format!("`!<{inner}>`: write the token by id, `!<[ID]>`"),
            ));
        } else if inner.is_empty() || inner.chars().any(|c| c.is_whitespace() || c == '<') {
            return Err(self.err(at, format!("`<{inner}>` is not a token name")));
        } else {
            format!("<{inner}>")
        };
        self.pos = end + 1;
        Ok(Item {
            text,
            repeatable: true,
        })
    }
}
