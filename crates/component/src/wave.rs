//! Component values as text, in the WebAssembly Value Encoding (WAVE) that `wasmtime run
//! --invoke` reads and prints: `f(1, "two", [3], {x: 4}, some(5), ok, {a, b})`.
//!
//! [`parse`] reads a value of a given type; [`parse_call`] a call, `name(args…)`, given the
//! function's parameter types once its name is known. `Display` for [`Val`] writes the same
//! form (a record's `none` fields left out, labels that are keywords escaped with `%`).

use std::fmt::{self, Write as _};

use crate::types::Type;
use crate::values::Val;

/// Text that is not a value of the type asked for: what was expected, and where.
#[derive(Debug, thiserror::Error)]
#[error("at byte {at}: {message}")]
pub struct ParseError {
    at: usize,
    message: String,
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

const KEYWORDS: [&str; 8] = ["true", "false", "some", "none", "ok", "err", "inf", "nan"];

/// Parses `text` as one value of type `ty`.
pub fn parse(text: &str, ty: &Type) -> Result<Val, ParseError> {
    let mut p = Parser {
        text,
        at: 0,
        depth: 0,
    };
    let v = p.value(ty)?;
    p.end()?;
    Ok(v)
}

/// Parses `text` as a call: the function's name, then its arguments, typed by what `params`
/// gives for that name (`None`: no such function).
pub fn parse_call<'t>(
    text: &str,
    params: impl FnOnce(&str) -> Option<Vec<&'t Type>>,
) -> Result<(String, Vec<Val>), ParseError> {
    let mut p = Parser {
        text,
        at: 0,
        depth: 0,
    };
    p.skip();
    let start = p.at;
    while p.peek().is_some_and(|c| c != '(' && !c.is_whitespace()) {
        p.bump();
    }
    let name = text[start..p.at].to_string();
    if name.is_empty() {
        return Err(p.error("a function's name"));
    }
    let types = params(&name).ok_or_else(|| ParseError {
        at: start,
        message: format!("no exported function `{name}`"),
    })?;
    p.expect('(')?;
    let args = p.sequence(')', types.len(), |p, i| p.value(types[i]))?;
    if args.len() != types.len() {
        return Err(p.error(&format!("{} arguments ({} given)", types.len(), args.len())));
    }
    p.end()?;
    Ok((name, args))
}

impl Parser<'_> {
    fn error(&self, expected: &str) -> ParseError {
        let found = self.text[self.at..].chars().take(12).collect::<String>();
        ParseError {
            at: self.at,
            message: if found.is_empty() {
                format!("expected {expected}, found the end")
            } else {
                format!("expected {expected}, found `{found}`")
            },
        }
    }

    fn peek(&self) -> Option<char> {
        self.text[self.at..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        Some(c)
    }

    fn skip(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip();
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<(), ParseError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error(&format!("`{c}`")))
        }
    }

    fn end(&mut self) -> Result<(), ParseError> {
        self.skip();
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.error("the end")),
        }
    }

    /// Items separated by commas up to `close` (a trailing comma allowed); `item` gets each
    /// item's index, and no more than `most` items are read.
    fn sequence<T>(
        &mut self,
        close: char,
        most: usize,
        mut item: impl FnMut(&mut Self, usize) -> Result<T, ParseError>,
    ) -> Result<Vec<T>, ParseError> {
        let mut items = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(items);
            }
            if items.len() == most {
                return Err(self.error(&format!("`{close}`")));
            }
            items.push(item(self, items.len())?);
            if !self.eat(',') {
                self.expect(close)?;
                return Ok(items);
            }
        }
    }

    /// A label: kebab-case, `%` before one that is a keyword.
    fn label(&mut self) -> Result<String, ParseError> {
        self.skip();
        let escaped = self.peek() == Some('%');
        if escaped {
            self.bump();
        }
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            self.bump();
        }
        if start == self.at {
            return Err(self.error("a label"));
        }
        Ok(self.text[start..self.at].to_string())
    }

    /// The token of a number or keyword: what a scalar is read from.
    fn token(&mut self) -> &str {
        self.skip();
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.' | '_'))
        {
            self.bump();
        }
        &self.text[start..self.at]
    }

    fn number<T: std::str::FromStr>(&mut self, what: &str) -> Result<T, ParseError> {
        let at = self.at;
        let token = self.token().to_string();
        token.parse().map_err(|_| {
            self.at = at;
            self.error(what)
        })
    }

    fn float(&mut self, what: &str) -> Result<f64, ParseError> {
        let at = self.at;
        let token = self.token().to_string();
        match token.as_str() {
            "nan" => Ok(f64::NAN),
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            t if t.chars().any(|c| c.is_ascii_digit()) && !t.contains("inf") => {
                t.parse().map_err(|_| {
                    self.at = at;
                    self.error(what)
                })
            }
            _ => {
                self.at = at;
                Err(self.error(what))
            }
        }
    }

    /// A quoted char or string's contents up to `quote`, escapes resolved.
    fn quoted(&mut self, quote: char) -> Result<String, ParseError> {
        self.expect(quote)?;
        let mut out = String::new();
        loop {
            match self.bump() {
                None => return Err(self.error(&format!("a closing `{quote}`"))),
                Some(c) if c == quote => return Ok(out),
                Some('\\') => out.push(match self.bump() {
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('r') => '\r',
                    Some('\\') => '\\',
                    Some('"') => '"',
                    Some('\'') => '\'',
                    Some('u') => {
                        self.expect('{')?;
                        let start = self.at;
                        while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                            self.bump();
                        }
                        let code = u32::from_str_radix(&self.text[start..self.at], 16).ok();
                        let c = code.and_then(char::from_u32);
                        self.expect('}')?;
                        c.ok_or_else(|| self.error("a Unicode scalar value"))?
                    }
                    _ => return Err(self.error("an escape (`\\n`, `\\t`, `\\u{…}`, …)")),
                }),
                Some(c) => out.push(c),
            }
        }
    }

    /// A payload in parentheses, if the text has one.
    fn payload(&mut self, ty: Option<&Type>) -> Result<Option<Box<Val>>, ParseError> {
        match ty {
            Some(t) => {
                self.expect('(')?;
                let v = self.value(t)?;
                self.expect(')')?;
                Ok(Some(Box::new(v)))
            }
            None => Ok(None),
        }
    }

    fn value(&mut self, ty: &Type) -> Result<Val, ParseError> {
        self.depth += 1;
        if self.depth > crate::types::MAX_DEPTH {
            return Err(self.error("a value nested less deeply"));
        }
        let v = self.value_inner(ty);
        self.depth -= 1;
        v
    }

    fn value_inner(&mut self, ty: &Type) -> Result<Val, ParseError> {
        self.skip();
        Ok(match ty {
            Type::Bool => match self.token() {
                "true" => Val::Bool(true),
                "false" => Val::Bool(false),
                _ => return Err(self.error("`true` or `false`")),
            },
            Type::S8 => Val::S8(self.number("an s8")?),
            Type::U8 => Val::U8(self.number("a u8")?),
            Type::S16 => Val::S16(self.number("an s16")?),
            Type::U16 => Val::U16(self.number("a u16")?),
            Type::S32 => Val::S32(self.number("an s32")?),
            Type::U32 => Val::U32(self.number("a u32")?),
            Type::S64 => Val::S64(self.number("an s64")?),
            Type::U64 => Val::U64(self.number("a u64")?),
            Type::Float32 => Val::Float32(self.float("a float32")? as f32),
            Type::Float64 => Val::Float64(self.float("a float64")?),
            Type::Char => {
                let s = self.quoted('\'')?;
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Val::Char(c),
                    _ => return Err(self.error("one char between `'`s")),
                }
            }
            Type::String => Val::String(self.quoted('"')?),
            Type::List(t) => {
                self.expect('[')?;
                Val::List(self.sequence(']', usize::MAX, |p, _| p.value(t))?)
            }
            Type::Tuple(types) => {
                self.expect('(')?;
                let items = self.sequence(')', types.len(), |p, i| p.value(&types[i]))?;
                if items.len() != types.len() {
                    return Err(self.error(&format!("a tuple of {}", types.len())));
                }
                Val::Tuple(items)
            }
            Type::Record(fields) => {
                self.expect('{')?;
                let mut given: Vec<Option<Val>> = vec![None; fields.len()];
                // `{:}` is the record whose fields are all left out.
                if !self.eat(':') {
                    self.sequence('}', usize::MAX, |p, _| {
                        let at = p.at;
                        let name = p.label()?;
                        let Some(i) = fields.iter().position(|f| f.name == name) else {
                            p.at = at;
                            return Err(p.error("a field of the record"));
                        };
                        p.expect(':')?;
                        given[i] = Some(p.value(&fields[i].ty)?);
                        Ok(())
                    })?;
                } else {
                    self.expect('}')?;
                }
                let mut values = Vec::with_capacity(fields.len());
                for (f, v) in fields.iter().zip(given) {
                    let v = match (v, &f.ty) {
                        (Some(v), _) => v,
                        (None, Type::Option(_)) => Val::Option(None),
                        (None, _) => return Err(self.error(&format!("field `{}`", f.name))),
                    };
                    values.push((f.name.clone(), v));
                }
                Val::Record(values)
            }
            Type::Flags(names) => {
                self.expect('{')?;
                let set = self.sequence('}', usize::MAX, |p, _| {
                    let at = p.at;
                    let name = p.label()?;
                    if names.contains(&name) {
                        Ok(name)
                    } else {
                        p.at = at;
                        Err(p.error("a flag of the type"))
                    }
                })?;
                let val = Val::Flags(set);
                if !val.has_type(ty) {
                    return Err(self.error("each flag once"));
                }
                val
            }
            Type::Variant(cases) => {
                let at = self.at;
                let name = self.label()?;
                let Some(case) = cases.iter().find(|c| c.name == name) else {
                    self.at = at;
                    return Err(self.error("a case of the variant"));
                };
                Val::Variant(name, self.payload(case.ty.as_ref())?)
            }
            Type::Enum(names) => {
                let at = self.at;
                let name = self.label()?;
                if !names.contains(&name) {
                    self.at = at;
                    return Err(self.error("a case of the enum"));
                }
                Val::Enum(name)
            }
            Type::Option(t) => {
                let at = self.at;
                match self.label()?.as_str() {
                    "none" => Val::Option(None),
                    "some" => Val::Option(self.payload(Some(t))?),
                    _ => {
                        self.at = at;
                        return Err(self.error("`some(…)` or `none`"));
                    }
                }
            }
            Type::Own(_) | Type::Borrow(_) => {
                return Err(self.error("no resource handle: they cannot be written as text"));
            }
            Type::Result { ok, err } => {
                let at = self.at;
                match self.label()?.as_str() {
                    "ok" => Val::Result(Ok(self.payload(ok.as_deref())?)),
                    "err" => Val::Result(Err(self.payload(err.as_deref())?)),
                    _ => {
                        self.at = at;
                        return Err(self.error("`ok` or `err`"));
                    }
                }
            }
        })
    }
}

fn label(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    if KEYWORDS.contains(&name) {
        f.write_char('%')?;
    }
    f.write_str(name)
}

fn quoted(f: &mut fmt::Formatter<'_>, s: &str, quote: char) -> fmt::Result {
    f.write_char(quote)?;
    for c in s.chars() {
        match c {
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            '\r' => f.write_str("\\r")?,
            '\\' => f.write_str("\\\\")?,
            c if c == quote => write!(f, "\\{c}")?,
            c if c.is_control() => write!(f, "\\u{{{:x}}}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char(quote)
}

fn float(f: &mut fmt::Formatter<'_>, v: f64) -> fmt::Result {
    if v.is_nan() {
        f.write_str("nan")
    } else if v.is_infinite() {
        f.write_str(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        write!(f, "{v}")
    }
}

fn list<'v>(
    f: &mut fmt::Formatter<'_>,
    open: &str,
    items: impl Iterator<Item = &'v Val>,
    close: &str,
) -> fmt::Result {
    f.write_str(open)?;
    for (i, v) in items.enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{v}")?;
    }
    f.write_str(close)
}

fn payload(f: &mut fmt::Formatter<'_>, p: &Option<Box<Val>>) -> fmt::Result {
    match p {
        Some(v) => write!(f, "({v})"),
        None => Ok(()),
    }
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::Bool(v) => write!(f, "{v}"),
            Val::S8(v) => write!(f, "{v}"),
            Val::U8(v) => write!(f, "{v}"),
            Val::S16(v) => write!(f, "{v}"),
            Val::U16(v) => write!(f, "{v}"),
            Val::S32(v) => write!(f, "{v}"),
            Val::U32(v) => write!(f, "{v}"),
            Val::S64(v) => write!(f, "{v}"),
            Val::U64(v) => write!(f, "{v}"),
            // As f32: its shortest decimal form, not the f64 one's.
            Val::Float32(v) if v.is_finite() => write!(f, "{v}"),
            Val::Float32(v) => float(f, *v as f64),
            Val::Float64(v) => float(f, *v),
            Val::Char(c) => quoted(f, &c.to_string(), '\''),
            Val::String(s) => quoted(f, s, '"'),
            Val::List(items) => list(f, "[", items.iter(), "]"),
            Val::Tuple(items) => list(f, "(", items.iter(), ")"),
            Val::Record(fields) => {
                let shown: Vec<_> = (fields.iter())
                    .filter(|(_, v)| *v != Val::Option(None))
                    .collect();
                if shown.is_empty() && !fields.is_empty() {
                    return f.write_str("{:}");
                }
                f.write_str("{")?;
                for (i, (name, v)) in shown.into_iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    label(f, name)?;
                    write!(f, ": {v}")?;
                }
                f.write_str("}")
            }
            Val::Variant(name, p) => {
                label(f, name)?;
                payload(f, p)
            }
            Val::Enum(name) => label(f, name),
            Val::Option(None) => f.write_str("none"),
            Val::Option(Some(v)) => write!(f, "some({v})"),
            Val::Result(Ok(p)) => {
                f.write_str("ok")?;
                payload(f, p)
            }
            Val::Result(Err(p)) => {
                f.write_str("err")?;
                payload(f, p)
            }
            // WAVE has no form for handles; this one is for people to read.
            Val::Resource(r) => write!(f, "<resource {}>", r.rep()),
            Val::Flags(set) => {
                f.write_str("{")?;
                for (i, name) in set.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    label(f, name)?;
                }
                f.write_str("}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::types::{Case, Field};

    fn record() -> Type {
        Type::Record(Arc::from([
            Field {
                name: "x".into(),
                ty: Type::U32,
            },
            Field {
                name: "y".into(),
                ty: Type::Option(Arc::new(Type::String)),
            },
        ]))
    }

    // The forms `wasmtime run --invoke` printed for the same values (wasmtime 49).
    #[test]
    fn values_print_as_wasmtime_prints_them() {
        let r = |y: Option<&str>| {
            Val::Record(vec![
                ("x".into(), Val::U32(1)),
                (
                    "y".into(),
                    Val::Option(y.map(|s| Box::new(Val::String(s.into())))),
                ),
            ])
        };
        assert_eq!(r(Some("a\nb")).to_string(), r#"{x: 1, y: some("a\nb")}"#);
        assert_eq!(r(None).to_string(), "{x: 1}");
        assert_eq!(Val::Float64(-0.0).to_string(), "-0");
        assert_eq!(Val::Float64(f64::NAN).to_string(), "nan");
        assert_eq!(Val::Float64(0.1).to_string(), "0.1");
        assert_eq!(Val::Float32(0.1).to_string(), "0.1");
        assert_eq!(Val::String("hello, 😀".into()).to_string(), "\"hello, 😀\"");
    }

    #[test]
    fn text_parses_by_type_and_refuses_what_does_not_fit() {
        let t = record();
        let v = parse(r#"{ y: some("a\u{1f600}"), x: 7 }"#, &t).unwrap();
        assert_eq!(v.to_string(), r#"{x: 7, y: some("a😀")}"#);
        assert!(parse("{y: none}", &t).is_err(), "x is required");
        assert!(parse("{x: 1, z: 2}", &t).is_err());
        assert!(parse("256", &Type::U8).is_err());
        assert!(parse("-1", &Type::U32).is_err());
        assert!(parse("1 2", &Type::U32).is_err());
        let v = Type::Variant(Arc::from([
            Case {
                name: "none".into(),
                ty: None,
            },
            Case {
                name: "n".into(),
                ty: Some(Type::S8),
            },
        ]));
        assert_eq!(parse("n(-3)", &v).unwrap().to_string(), "n(-3)");
        assert_eq!(parse("%none", &v).unwrap().to_string(), "%none");
        let res = Type::Result {
            ok: None,
            err: Some(Arc::new(Type::String)),
        };
        assert_eq!(parse("ok", &res).unwrap(), Val::Result(Ok(None)));
        assert_eq!(
            parse(r#"err("x")"#, &res).unwrap().to_string(),
            r#"err("x")"#
        );
        let (name, args) = parse_call("add(1, 2,)", |n| {
            (n == "add").then(|| vec![&Type::U32, &Type::U32])
        })
        .unwrap();
        assert_eq!(
            (name.as_str(), args),
            ("add", vec![Val::U32(1), Val::U32(2)])
        );
        assert!(parse_call("add(1)", |_| Some(vec![&Type::U32, &Type::U32])).is_err());
        assert!(parse_call("sub(1)", |_| None).is_err());
    }
}
