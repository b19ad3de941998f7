//! Safe evaluation of validation `condition`s (score.md §3.7.2) and `skip_when` expressions
//! (§5.7). Upstream uses Python `eval` for `skip_when`; we parse a small, side-effect-free
//! expression language instead and never execute code.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;
use thiserror::Error;

/// Whether a validation `condition` holds for a context of integer variables.
///
/// Upstream's rules, kept on purpose because scores depend on them: parts are split on the
/// literal ` and `; each part must *start* with `name op integer`; a part that does not match,
/// or names a variable the context lacks, counts as true (fail-open).
pub fn condition_applies(condition: Option<&str>, vars: &HashMap<&str, i64>) -> bool {
    match condition {
        None => true,
        Some(text) => Condition::parse(text).applies(vars),
    }
}

/// Comparison operator of a condition part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Ge,
    Le,
    Eq,
    Ne,
    Gt,
    Lt,
}

/// A validation `condition` parsed once, to be checked against many sheets (the 516-sheet
/// preview of `mozart validate --json` checks ~500,000 sheet/rule pairs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// `(name, op, rhs)` for each part that matched the pattern; parts that did not match are
    /// true and simply absent.
    parts: Vec<(String, CmpOp, i64)>,
}

impl Condition {
    /// Parse with upstream's rules (see [`condition_applies`]).
    pub fn parse(condition: &str) -> Condition {
        static PART: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"^(\w+)\s*(>=|<=|==|!=|>|<)\s*(\d+)").expect("static regex")
        });
        let condition = condition.trim();
        let pieces: Vec<&str> = if condition.contains(" and ") {
            condition.split(" and ").collect()
        } else {
            vec![condition]
        };
        let parts = pieces
            .into_iter()
            .filter_map(|part| {
                let part = part.trim();
                if part.is_ascii() {
                    return parse_ascii_part(part);
                }
                let caps = PART.captures(part)?;
                let rhs = caps[3].parse::<i64>().ok()?;
                let op = match &caps[2] {
                    ">=" => CmpOp::Ge,
                    "<=" => CmpOp::Le,
                    "==" => CmpOp::Eq,
                    "!=" => CmpOp::Ne,
                    ">" => CmpOp::Gt,
                    _ => CmpOp::Lt,
                };
                Some((caps[1].to_string(), op, rhs))
            })
            .collect();
        Condition { parts }
    }

    /// Whether every part holds for `vars` (`sheet_num` defaults to 0; other missing names
    /// make their part true).
    pub fn applies(&self, vars: &HashMap<&str, i64>) -> bool {
        self.applies_to(|name| vars.get(name).copied())
    }

    /// [`Condition::applies`] with the variables coming from `get` (no map to build per
    /// sheet when one condition is checked against hundreds of sheets).
    pub fn applies_to(&self, get: impl Fn(&str) -> Option<i64>) -> bool {
        self.parts.iter().all(|(name, op, rhs)| {
            let value = if name == "sheet_num" {
                get("sheet_num").unwrap_or(0)
            } else {
                match get(name.as_str()) {
                    Some(v) => v,
                    None => return true,
                }
            };
            match op {
                CmpOp::Ge => value >= *rhs,
                CmpOp::Le => value <= *rhs,
                CmpOp::Eq => value == *rhs,
                CmpOp::Ne => value != *rhs,
                CmpOp::Gt => value > *rhs,
                CmpOp::Lt => value < *rhs,
            }
        })
    }
}

/// `^(\w+)\s*(>=|<=|==|!=|>|<)\s*(\d+)` on ASCII text without the regex engine (its
/// capture search was most of `Condition::parse`, run for each of a score's rules). On ASCII,
/// `\w` is `[A-Za-z0-9_]`, `\d` is `[0-9]` and `\s` is `[\t\n\v\f\r ]`.
fn parse_ascii_part(part: &str) -> Option<(String, CmpOp, i64)> {
    let b = part.as_bytes();
    let name_len = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
        .count();
    if name_len == 0 {
        return None;
    }
    let is_space = |c: &u8| matches!(c, b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r' | b' ');
    let mut i = name_len + b[name_len..].iter().take_while(|c| is_space(c)).count();
    let (op, len) = match (b.get(i), b.get(i + 1)) {
        (Some(b'>'), Some(b'=')) => (CmpOp::Ge, 2),
        (Some(b'<'), Some(b'=')) => (CmpOp::Le, 2),
        (Some(b'='), Some(b'=')) => (CmpOp::Eq, 2),
        (Some(b'!'), Some(b'=')) => (CmpOp::Ne, 2),
        (Some(b'>'), _) => (CmpOp::Gt, 1),
        (Some(b'<'), _) => (CmpOp::Lt, 1),
        _ => return None,
    };
    i += len;
    i += b[i..].iter().take_while(|c| is_space(c)).count();
    let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let rhs = part[i..i + digits].parse::<i64>().ok()?;
    Some((part[..name_len].to_string(), op, rhs))
}

/// What of a validation `condition` [`Condition::parse`] cannot read, in order: each part
/// (split on ` and ` as it splits) that is not `name op integer` at its start (`Err(part)`,
/// which counts as true), or the text after the comparison it reads (`Ok((read, ignored))`:
/// `movement == 1 or movement == 2` reads `movement == 1` only).
pub fn unread_condition_parts(condition: &str) -> Vec<Result<(String, String), String>> {
    static READ: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^(\w+)\s*(>=|<=|==|!=|>|<)\s*(\d+)").expect("static regex"));
    let condition = condition.trim();
    let pieces: Vec<&str> = if condition.contains(" and ") {
        condition.split(" and ").collect()
    } else {
        vec![condition]
    };
    let mut out = Vec::new();
    for part in pieces {
        let part = part.trim();
        let read = parse_one(part).and_then(|_| READ.find(part));
        match read {
            None => out.push(Err(part.to_string())),
            Some(m) if !part[m.end()..].trim().is_empty() => out.push(Ok((
                part[..m.end()].to_string(),
                part[m.end()..].trim().to_string(),
            ))),
            Some(_) => {}
        }
    }
    out
}

/// The variable names a validation `condition` compares, in order.
pub fn condition_names(condition: &str) -> Vec<String> {
    Condition::parse(condition)
        .parts
        .into_iter()
        .map(|(name, _, _)| name)
        .collect()
}

fn parse_one(part: &str) -> Option<(String, CmpOp, i64)> {
    if part.is_ascii() {
        return parse_ascii_part(part);
    }
    Condition::parse(part).parts.into_iter().next()
}

/// A `skip_when` expression could not be evaluated (the runtime then runs the sheet).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ExprError {
    /// The text is not in the supported expression language.
    #[error("cannot parse skip_when expression at column {pos}: {message}")]
    Parse {
        /// Where, counted in characters from 1 (one past the end for an expression cut
        /// short).
        pos: usize,
        /// What was expected.
        message: String,
    },
    /// The expression parsed but failed (unknown name, bad index, type mismatch).
    #[error("skip_when expression failed: {0}")]
    Eval(String),
}

/// Names visible to a `skip_when` expression: `sheets` (sheet number → state record) and
/// `job` (job record). Records are JSON objects (`status`, `validation_passed`, …).
#[derive(Debug, Clone, Default)]
pub struct ExprContext {
    /// Sheet state records by sheet number.
    pub sheets: HashMap<u32, serde_json::Map<String, serde_json::Value>>,
    /// The job record.
    pub job: serde_json::Map<String, serde_json::Value>,
}

/// Evaluate a `skip_when` expression to its Python truthiness.
pub fn evaluate(expr: &str, ctx: &ExprContext) -> Result<bool, ExprError> {
    let ast = parse_ast(expr)?;
    Ok(eval(&ast, ctx)?.truthy())
}

/// Check a `skip_when` expression's syntax without evaluating it (what `mozart validate`
/// and the score's load check ask): the error says where, in characters from 1.
pub fn parse(expr: &str) -> Result<(), ExprError> {
    parse_ast(expr).map(drop)
}

fn parse_ast(expr: &str) -> Result<Ast, ExprError> {
    parse_bytes(expr).map_err(|e| match e {
        // Byte offsets inside, a column (characters from 1) outside.
        ExprError::Parse { pos, message } => ExprError::Parse {
            pos: expr
                .get(..pos.min(expr.len()))
                .map_or(pos, |before| before.chars().count())
                + 1,
            message,
        },
        other => other,
    })
}

fn parse_bytes(expr: &str) -> Result<Ast, ExprError> {
    let tokens = lex(expr)?;
    // Bounded input keeps the recursive parser, evaluator and the AST's drop well inside a
    // worker thread's stack: a skip_when is user text evaluated inside the conductor, and a
    // stack overflow there would abort the daemon with every job in it (found by fuzzing,
    // docs/reliability.md).
    if tokens.len() > MAX_TOKENS {
        return Err(ExprError::Parse {
            pos: tokens[MAX_TOKENS].0,
            message: format!("expression longer than {MAX_TOKENS} tokens"),
        });
    }
    let mut p = ParserState {
        tokens,
        pos: 0,
        depth: 0,
        end: expr.len(),
    };
    let ast = p.parse_or()?;
    if p.pos < p.tokens.len() {
        return Err(ExprError::Parse {
            pos: p.tokens[p.pos].0,
            message: "unexpected trailing input".into(),
        });
    }
    Ok(ast)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Int(i64),
    Float(f64),
    Str(String),
    Name(String),
    Op(&'static str),
}

/// Most tokens one expression may have.
const MAX_TOKENS: usize = 1024;

/// Deepest nesting of brackets, `not` and unary `-` the parser follows.
const MAX_NESTING: usize = 64;

fn lex(s: &str) -> Result<Vec<(usize, Tok)>, ExprError> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    // Whole characters, not bytes: a non-ASCII byte read as a `char` could end a name in
    // the middle of a UTF-8 sequence and panic on the slice (found by fuzzing).
    while let Some(c) = s[i..].chars().next() {
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        let start = i;
        if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            let text = &s[start..i];
            let tok = if text.contains('.') {
                Tok::Float(text.parse().map_err(|_| ExprError::Parse {
                    pos: start,
                    message: format!("bad number {text}"),
                })?)
            } else {
                Tok::Int(text.parse().map_err(|_| ExprError::Parse {
                    pos: start,
                    message: format!("bad number {text}"),
                })?)
            };
            out.push((start, tok));
        } else if c.is_alphabetic() || c == '_' {
            while let Some(ch) = s[i..].chars().next() {
                if !(ch.is_alphanumeric() || ch == '_') {
                    break;
                }
                i += ch.len_utf8();
            }
            out.push((start, Tok::Name(s[start..i].to_string())));
        } else if c == '\'' || c == '"' {
            i += 1;
            let mut text = String::new();
            loop {
                let Some(ch) = s[i..].chars().next() else {
                    return Err(ExprError::Parse {
                        pos: start,
                        message: "unterminated string".into(),
                    });
                };
                i += ch.len_utf8();
                if ch == c {
                    break;
                }
                if ch == '\\' {
                    if let Some(esc) = s[i..].chars().next() {
                        i += esc.len_utf8();
                        text.push(match esc {
                            'n' => '\n',
                            't' => '\t',
                            other => other,
                        });
                        continue;
                    }
                }
                text.push(ch);
            }
            out.push((start, Tok::Str(text)));
        } else {
            const OPS: [&str; 14] = [
                "==", "!=", "<=", ">=", "<", ">", "(", ")", "[", "]", ".", ",", "+", "-",
            ];
            let Some(op) = OPS.iter().find(|op| s[i..].starts_with(**op)) else {
                return Err(ExprError::Parse {
                    pos: i,
                    message: if c == '=' {
                        "'=' is not a comparison: write '=='".to_string()
                    } else {
                        format!("unexpected character '{c}'")
                    },
                });
            };
            i += op.len();
            out.push((start, Tok::Op(op)));
        }
    }
    Ok(out)
}

#[derive(Debug, Clone)]
enum Ast {
    Lit(Val),
    List(Vec<Ast>),
    Name(String),
    Attr(Box<Ast>, String),
    Index(Box<Ast>, Box<Ast>),
    Call(Box<Ast>, Vec<Ast>),
    Not(Box<Ast>),
    Neg(Box<Ast>),
    And(Box<Ast>, Box<Ast>),
    Or(Box<Ast>, Box<Ast>),
    Cmp(Box<Ast>, String, Box<Ast>),
}

struct ParserState {
    tokens: Vec<(usize, Tok)>,
    pos: usize,
    /// Current recursion depth of [`ParserState::nested`].
    depth: usize,
    /// The expression's length: where an expression cut short ends.
    end: usize,
}

impl ParserState {
    /// Run a recursive step, refusing input nested deeper than [`MAX_NESTING`].
    fn nested<T>(
        &mut self,
        step: impl FnOnce(&mut Self) -> Result<T, ExprError>,
    ) -> Result<T, ExprError> {
        if self.depth >= MAX_NESTING {
            return Err(ExprError::Parse {
                pos: self.here(),
                message: format!("expression nested deeper than {MAX_NESTING} levels"),
            });
        }
        self.depth += 1;
        let result = step(self);
        self.depth -= 1;
        result
    }

    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|(_, t)| t)
    }

    fn here(&self) -> usize {
        self.tokens.get(self.pos).map_or(self.end, |(p, _)| *p)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Op(o)) if *o == op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_word(&mut self, word: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Name(n)) if n == word) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_op(&mut self, op: &str) -> Result<(), ExprError> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(ExprError::Parse {
                pos: self.here(),
                message: format!("expected '{op}'"),
            })
        }
    }

    fn parse_or(&mut self) -> Result<Ast, ExprError> {
        let mut left = self.parse_and()?;
        while self.eat_word("or") {
            left = Ast::Or(Box::new(left), Box::new(self.parse_and()?));
        }
        Ok(left)
    }

    fn parse_and(&mut self) -> Result<Ast, ExprError> {
        let mut left = self.parse_not()?;
        while self.eat_word("and") {
            left = Ast::And(Box::new(left), Box::new(self.parse_not()?));
        }
        Ok(left)
    }

    fn parse_not(&mut self) -> Result<Ast, ExprError> {
        if self.eat_word("not") {
            return Ok(Ast::Not(Box::new(self.nested(Self::parse_not)?)));
        }
        self.parse_cmp()
    }

    fn parse_cmp(&mut self) -> Result<Ast, ExprError> {
        let mut left = self.parse_unary()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Op(o)) if ["==", "!=", "<", "<=", ">", ">="].contains(o) => o.to_string(),
                Some(Tok::Name(n)) if n == "in" => "in".to_string(),
                Some(Tok::Name(n)) if n == "is" => "is".to_string(),
                Some(Tok::Name(n)) if n == "not" => {
                    if matches!(self.tokens.get(self.pos + 1), Some((_, Tok::Name(m))) if m == "in")
                    {
                        self.pos += 1;
                        "not in".to_string()
                    } else {
                        break;
                    }
                }
                _ => break,
            };
            self.pos += 1;
            let op = if op == "is" && self.eat_word("not") {
                "is not".to_string()
            } else {
                op
            };
            let right = self.parse_unary()?;
            left = Ast::Cmp(Box::new(left), op, Box::new(right));
        }
        Ok(left)
    }

    fn parse_unary(&mut self) -> Result<Ast, ExprError> {
        if self.eat_op("-") {
            return Ok(Ast::Neg(Box::new(self.nested(Self::parse_unary)?)));
        }
        self.parse_postfix()
    }

    fn parse_postfix(&mut self) -> Result<Ast, ExprError> {
        let mut node = self.parse_primary()?;
        loop {
            if self.eat_op(".") {
                match self.peek().cloned() {
                    Some(Tok::Name(n)) => {
                        self.pos += 1;
                        node = Ast::Attr(Box::new(node), n);
                    }
                    _ => {
                        return Err(ExprError::Parse {
                            pos: self.here(),
                            message: "expected attribute name".into(),
                        })
                    }
                }
            } else if self.eat_op("[") {
                let index = self.nested(Self::parse_or)?;
                self.expect_op("]")?;
                node = Ast::Index(Box::new(node), Box::new(index));
            } else if self.eat_op("(") {
                let mut args = Vec::new();
                if !self.eat_op(")") {
                    loop {
                        args.push(self.nested(Self::parse_or)?);
                        if self.eat_op(")") {
                            break;
                        }
                        self.expect_op(",")?;
                    }
                }
                node = Ast::Call(Box::new(node), args);
            } else {
                return Ok(node);
            }
        }
    }

    fn parse_primary(&mut self) -> Result<Ast, ExprError> {
        let pos = self.here();
        let Some(tok) = self.peek().cloned() else {
            return Err(ExprError::Parse {
                pos,
                message: "unexpected end of expression".into(),
            });
        };
        self.pos += 1;
        Ok(match tok {
            Tok::Int(i) => Ast::Lit(Val::Int(i)),
            Tok::Float(f) => Ast::Lit(Val::Float(f)),
            Tok::Str(s) => Ast::Lit(Val::Str(s)),
            Tok::Name(n) => match n.as_str() {
                "True" => Ast::Lit(Val::Bool(true)),
                "False" => Ast::Lit(Val::Bool(false)),
                "None" => Ast::Lit(Val::None),
                _ => Ast::Name(n),
            },
            Tok::Op("[") => {
                let mut items = Vec::new();
                if !self.eat_op("]") {
                    loop {
                        items.push(self.nested(Self::parse_or)?);
                        if self.eat_op("]") {
                            break;
                        }
                        self.expect_op(",")?;
                    }
                }
                Ast::List(items)
            }
            Tok::Op("(") => {
                let inner = self.nested(Self::parse_or)?;
                self.expect_op(")")?;
                inner
            }
            Tok::Op(op) => {
                return Err(ExprError::Parse {
                    pos,
                    message: format!("unexpected '{op}'"),
                })
            }
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Val {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Val>),
    Dict(Vec<(Val, Val)>),
    Builtin(String),
    Method(Box<Val>, String),
}

impl Val {
    /// A missing key as Python's `KeyError` shows it: `7`, `'name'` (not this enum's
    /// `Int(7)`, which also read to the log's redaction like a secret's name).
    fn key_repr(&self) -> String {
        match self {
            Val::None => "None".into(),
            Val::Bool(b) => if *b { "True" } else { "False" }.into(),
            Val::Int(i) => i.to_string(),
            Val::Float(f) => f.to_string(),
            Val::Str(s) => format!("'{s}'"),
            other => format!("{other:?}"),
        }
    }

    fn truthy(&self) -> bool {
        match self {
            Val::None => false,
            Val::Bool(b) => *b,
            Val::Int(i) => *i != 0,
            Val::Float(f) => *f != 0.0,
            Val::Str(s) => !s.is_empty(),
            Val::List(l) => !l.is_empty(),
            Val::Dict(d) => !d.is_empty(),
            Val::Builtin(_) | Val::Method(..) => true,
        }
    }

    fn from_json(v: &serde_json::Value) -> Val {
        match v {
            serde_json::Value::Null => Val::None,
            serde_json::Value::Bool(b) => Val::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Val::Int(i),
                None => Val::Float(n.as_f64().unwrap_or(0.0)),
            },
            serde_json::Value::String(s) => Val::Str(s.clone()),
            serde_json::Value::Array(a) => Val::List(a.iter().map(Val::from_json).collect()),
            serde_json::Value::Object(o) => Val::Dict(
                o.iter()
                    .map(|(k, v)| (Val::Str(k.clone()), Val::from_json(v)))
                    .collect(),
            ),
        }
    }

    fn num(&self) -> Option<f64> {
        match self {
            Val::Bool(b) => Some(f64::from(u8::from(*b))),
            Val::Int(i) => Some(*i as f64),
            Val::Float(f) => Some(*f),
            _ => None,
        }
    }

    fn equals(&self, other: &Val) -> bool {
        match (self.num(), other.num()) {
            (Some(a), Some(b)) => a == b,
            _ => self == other,
        }
    }

    fn dict_get(&self, key: &Val) -> Option<&Val> {
        match self {
            Val::Dict(entries) => entries.iter().find(|(k, _)| k.equals(key)).map(|(_, v)| v),
            _ => None,
        }
    }
}

fn lookup_name(name: &str, ctx: &ExprContext) -> Result<Val, ExprError> {
    match name {
        "sheets" => {
            let mut keys: Vec<&u32> = ctx.sheets.keys().collect();
            keys.sort();
            Ok(Val::Dict(
                keys.into_iter()
                    .map(|k| {
                        (
                            Val::Int(i64::from(*k)),
                            Val::from_json(&serde_json::Value::Object(ctx.sheets[k].clone())),
                        )
                    })
                    .collect(),
            ))
        }
        "job" => Ok(Val::from_json(&serde_json::Value::Object(ctx.job.clone()))),
        "len" | "bool" | "int" | "str" | "any" | "all" | "max" | "min" => {
            Ok(Val::Builtin(name.to_string()))
        }
        other => Err(ExprError::Eval(format!("name '{other}' is not defined"))),
    }
}

fn eval(ast: &Ast, ctx: &ExprContext) -> Result<Val, ExprError> {
    match ast {
        Ast::Lit(v) => Ok(v.clone()),
        Ast::List(items) => Ok(Val::List(
            items
                .iter()
                .map(|i| eval(i, ctx))
                .collect::<Result<_, _>>()?,
        )),
        Ast::Name(n) => lookup_name(n, ctx),
        Ast::Not(inner) => Ok(Val::Bool(!eval(inner, ctx)?.truthy())),
        Ast::Neg(inner) => match eval(inner, ctx)? {
            Val::Int(i) => Ok(Val::Int(-i)),
            Val::Float(f) => Ok(Val::Float(-f)),
            other => Err(ExprError::Eval(format!(
                "bad operand for unary -: {other:?}"
            ))),
        },
        Ast::And(a, b) => {
            let left = eval(a, ctx)?;
            if left.truthy() {
                eval(b, ctx)
            } else {
                Ok(left)
            }
        }
        Ast::Or(a, b) => {
            let left = eval(a, ctx)?;
            if left.truthy() {
                Ok(left)
            } else {
                eval(b, ctx)
            }
        }
        Ast::Attr(obj, name) => {
            let obj = eval(obj, ctx)?;
            if matches!(obj, Val::Dict(_))
                && ["get", "keys", "values", "items"].contains(&name.as_str())
            {
                return Ok(Val::Method(Box::new(obj), name.clone()));
            }
            obj.dict_get(&Val::Str(name.clone()))
                .cloned()
                .ok_or_else(|| ExprError::Eval(format!("object has no attribute '{name}'")))
        }
        Ast::Index(obj, index) => {
            let obj = eval(obj, ctx)?;
            let index = eval(index, ctx)?;
            match &obj {
                Val::List(items) => {
                    let i = index
                        .num()
                        .ok_or_else(|| ExprError::Eval("list index must be an integer".into()))?
                        as i64;
                    let i = if i < 0 { items.len() as i64 + i } else { i };
                    items
                        .get(i as usize)
                        .cloned()
                        .ok_or_else(|| ExprError::Eval("list index out of range".into()))
                }
                _ => obj
                    .dict_get(&index)
                    .cloned()
                    .ok_or_else(|| ExprError::Eval(format!("KeyError: {}", index.key_repr()))),
            }
        }
        Ast::Call(func, args) => {
            let func = eval(func, ctx)?;
            let args: Vec<Val> = args
                .iter()
                .map(|a| eval(a, ctx))
                .collect::<Result<_, _>>()?;
            call(func, args)
        }
        Ast::Cmp(a, op, b) => {
            let (l, r) = (eval(a, ctx)?, eval(b, ctx)?);
            let result = match op.as_str() {
                "==" => l.equals(&r),
                "!=" => !l.equals(&r),
                "is" => l == r,
                "is not" => l != r,
                "in" | "not in" => {
                    let found = match &r {
                        Val::List(items) => items.iter().any(|x| x.equals(&l)),
                        Val::Dict(_) => r.dict_get(&l).is_some(),
                        Val::Str(s) => matches!(&l, Val::Str(sub) if s.contains(sub.as_str())),
                        _ => {
                            return Err(ExprError::Eval("argument of 'in' is not iterable".into()))
                        }
                    };
                    found == (op == "in")
                }
                _ => {
                    let ord = match (l.num(), r.num(), &l, &r) {
                        (Some(x), Some(y), _, _) => x.partial_cmp(&y),
                        (_, _, Val::Str(x), Val::Str(y)) => Some(x.cmp(y)),
                        _ => None,
                    }
                    .ok_or_else(|| ExprError::Eval(format!("cannot compare {l:?} {op} {r:?}")))?;
                    match op.as_str() {
                        "<" => ord.is_lt(),
                        "<=" => ord.is_le(),
                        ">" => ord.is_gt(),
                        _ => ord.is_ge(),
                    }
                }
            };
            Ok(Val::Bool(result))
        }
    }
}

fn iterate(v: &Val) -> Result<Vec<Val>, ExprError> {
    match v {
        Val::List(items) => Ok(items.clone()),
        Val::Dict(entries) => Ok(entries.iter().map(|(k, _)| k.clone()).collect()),
        Val::Str(s) => Ok(s.chars().map(|c| Val::Str(c.to_string())).collect()),
        other => Err(ExprError::Eval(format!("{other:?} is not iterable"))),
    }
}

fn call(func: Val, args: Vec<Val>) -> Result<Val, ExprError> {
    let arity = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(ExprError::Eval(format!(
                "expected {}, got {}",
                crate::plural(n, "argument", "arguments"),
                args.len()
            )))
        }
    };
    match func {
        Val::Method(obj, name) => match name.as_str() {
            "get" => {
                let key = args
                    .first()
                    .ok_or_else(|| ExprError::Eval("get() needs a key".into()))?;
                Ok(obj
                    .dict_get(key)
                    .cloned()
                    .unwrap_or_else(|| args.get(1).cloned().unwrap_or(Val::None)))
            }
            "keys" => Ok(Val::List(iterate(&obj)?)),
            "values" => match *obj {
                Val::Dict(entries) => Ok(Val::List(entries.into_iter().map(|(_, v)| v).collect())),
                _ => Err(ExprError::Eval("values() needs a dict".into())),
            },
            "items" => match *obj {
                Val::Dict(entries) => Ok(Val::List(
                    entries
                        .into_iter()
                        .map(|(k, v)| Val::List(vec![k, v]))
                        .collect(),
                )),
                _ => Err(ExprError::Eval("items() needs a dict".into())),
            },
            other => Err(ExprError::Eval(format!("unsupported method {other}()"))),
        },
        Val::Builtin(name) => match name.as_str() {
            "len" => {
                arity(1)?;
                Ok(Val::Int(iterate(&args[0])?.len() as i64))
            }
            "bool" => {
                arity(1)?;
                Ok(Val::Bool(args[0].truthy()))
            }
            "int" => {
                arity(1)?;
                match &args[0] {
                    Val::Str(s) => {
                        s.trim().parse::<i64>().map(Val::Int).map_err(|_| {
                            ExprError::Eval(format!("invalid literal for int(): '{s}'"))
                        })
                    }
                    v => v
                        .num()
                        .map(|f| Val::Int(f.trunc() as i64))
                        .ok_or_else(|| ExprError::Eval("int() needs a number".into())),
                }
            }
            "str" => {
                arity(1)?;
                Ok(Val::Str(match &args[0] {
                    Val::Str(s) => s.clone(),
                    Val::None => "None".into(),
                    Val::Bool(b) => if *b { "True" } else { "False" }.into(),
                    Val::Int(i) => i.to_string(),
                    Val::Float(f) => crate::yaml::python_float(*f),
                    other => format!("{other:?}"),
                }))
            }
            "any" => {
                arity(1)?;
                Ok(Val::Bool(iterate(&args[0])?.iter().any(Val::truthy)))
            }
            "all" => {
                arity(1)?;
                Ok(Val::Bool(iterate(&args[0])?.iter().all(Val::truthy)))
            }
            "max" | "min" => {
                let items = if args.len() == 1 {
                    iterate(&args[0])?
                } else {
                    args
                };
                let mut best: Option<Val> = None;
                for item in items {
                    let n = item
                        .num()
                        .ok_or_else(|| ExprError::Eval(format!("{name}() needs numbers")))?;
                    let replace = match &best {
                        None => true,
                        Some(b) => {
                            let bn = b.num().unwrap_or(0.0);
                            if name == "max" {
                                n > bn
                            } else {
                                n < bn
                            }
                        }
                    };
                    if replace {
                        best = Some(item);
                    }
                }
                best.ok_or_else(|| ExprError::Eval(format!("{name}() arg is an empty sequence")))
            }
            other => Err(ExprError::Eval(format!("unsupported function {other}()"))),
        },
        other => Err(ExprError::Eval(format!("{other:?} is not callable"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_condition_parts_match_the_regex() {
        let re = Regex::new(r"^(\w+)\s*(>=|<=|==|!=|>|<)\s*(\d+)").unwrap();
        let op_text = |op: CmpOp| match op {
            CmpOp::Ge => ">=",
            CmpOp::Le => "<=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Gt => ">",
            CmpOp::Lt => "<",
        };
        for text in [
            "sheet_num >= 3",
            "stage==2",
            "x\t<\x0b10",
            "a > = 3",
            "a >",
            "_ < 99999999999999999999",
            "9 != 0x",
            ">= 3",
            "a => 3",
            "stage == 2 trailing",
            "a<=-1",
            "a ! = 1",
            "n>07",
            "a\x0c==\x0c1",
            "a\x1c== 1",
        ] {
            let expected = re.captures(text).and_then(|c| {
                let rhs = c[3].parse::<i64>().ok()?;
                Some((c[1].to_string(), c[2].to_string(), rhs))
            });
            let got = parse_ascii_part(text).map(|(n, op, rhs)| (n, op_text(op).to_string(), rhs));
            assert_eq!(got, expected, "{text:?}");
        }
    }
    use serde_json::json;

    fn ctx() -> ExprContext {
        let mut c = ExprContext::default();
        let rec = |status: &str, passed: serde_json::Value| {
            json!({"status": status, "validation_passed": passed, "attempt_count": 2})
                .as_object()
                .cloned()
                .unwrap_or_default()
        };
        c.sheets.insert(1, rec("completed", json!(true)));
        c.sheets.insert(3, rec("failed", json!(false)));
        c
    }

    #[test]
    fn skip_when_expressions() {
        let c = ctx();
        assert!(evaluate("sheets.get(1) and sheets[1].validation_passed", &c).unwrap());
        assert!(!evaluate("sheets.get(2) and sheets[2].validation_passed", &c).unwrap());
        assert!(evaluate("sheets[3].status == 'failed'", &c).unwrap());
        assert!(evaluate("not sheets[3].validation_passed", &c).unwrap());
        assert!(evaluate("len(sheets) >= 2 and sheets[1].attempt_count > 1", &c).unwrap());
        assert!(evaluate("True", &c).unwrap());
        assert!(!evaluate("False or None", &c).unwrap());
        assert!(evaluate("3 in [1, 2, 3]", &c).unwrap());
    }

    /// A missing key reads as Python's `KeyError: 7` / `KeyError: 'x'` (it read `Int(7)`,
    /// which the log's redaction then took for a secret).
    #[test]
    fn a_missing_key_is_named_as_python_names_it() {
        let c = ctx();
        let err = evaluate("sheets[7].status == 'completed'", &c).unwrap_err();
        assert_eq!(err.to_string(), "skip_when expression failed: KeyError: 7");
        let err = evaluate("sheets[1]['nope']", &c).unwrap_err();
        assert_eq!(
            err.to_string(),
            "skip_when expression failed: KeyError: 'nope'"
        );
    }

    #[test]
    fn bad_expressions_are_errors_not_code() {
        let c = ctx();
        assert!(matches!(
            evaluate("__import__('os').system('true')", &c),
            Err(ExprError::Eval(_))
        ));
        assert!(matches!(
            evaluate("sheets[", &c),
            Err(ExprError::Parse { .. })
        ));
        assert!(matches!(
            evaluate("sheets[2].status", &c),
            Err(ExprError::Eval(_))
        ));
    }

    #[test]
    fn conditions_follow_upstream_rules() {
        let vars: HashMap<&str, i64> = [("sheet_num", 2), ("stage", 2), ("instance", 1)].into();
        assert!(condition_applies(None, &vars));
        assert!(condition_applies(Some("stage == 2"), &vars));
        assert!(!condition_applies(Some("stage == 3"), &vars));
        assert!(condition_applies(
            Some("stage == 2 AND instance == 9"),
            &vars
        ));
        assert!(!condition_applies(
            Some("stage == 2 and instance == 9"),
            &vars
        ));
        assert!(condition_applies(Some("sheet_num > -1"), &vars));
        assert!(condition_applies(Some("movement == 7"), &vars));
        assert!(condition_applies(Some("sheet_num >= 2 trailing"), &vars));
    }
}
