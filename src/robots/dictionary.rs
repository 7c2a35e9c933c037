//! An RFC 9651 Dictionary, read only as far as usage preferences need it.
//!
//! Algorithm: the parser of RFC 9651 §4.2.2, one pass over the bytes, validating every
//! member (keys, bare items of every type, inner lists, parameters) exactly as the RFC
//! does, but keeping only what a preference is made of: each key and whether its value is
//! a Token, and which. Any syntax error fails the whole Dictionary (RFC 9651 §4.2: a
//! parse failure discards the field), which the usage rules read as "every preference of
//! this statement unknown". A repeated key keeps its last value (§4.2.2).
//!
//! Costs and limits: linear in the input, no backtracking; the result holds at most one
//! entry per distinct key, and the input is one robots.txt line or one header value, so
//! both are bounded by the caller's line limit.

/// A member's value, as far as preferences are concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    /// A Token (`y`, `n`, `yes`, …).
    Token(&'a [u8]),
    /// Anything else: an Integer, a String, a Boolean (a bare key), an Inner List, …
    Other,
}

/// Parses `input` as a Dictionary: its members in order of first appearance, each with
/// its last value; `None` when the input is not a valid Dictionary.
pub(crate) fn parse(input: &[u8]) -> Option<Vec<(&[u8], Value<'_>)>> {
    let mut p = DictionaryParser { s: input, i: 0 };
    p.skip(|b| b == b' ');
    let mut members: Vec<(&[u8], Value<'_>)> = Vec::new();
    // Trailing spaces are not part of a field value (RFC 9651 §4.2).
    let end = input.len() - input.iter().rev().take_while(|&&b| b == b' ').count();
    p.s = &input[..end.max(p.i)];
    while !p.done() {
        let key = p.key()?;
        let value = if p.eat(b'=') {
            if p.peek() == Some(b'(') {
                p.inner_list()?;
                Value::Other
            } else {
                let value = p.bare_item()?;
                p.parameters()?;
                value
            }
        } else {
            p.parameters()?;
            Value::Other
        };
        match members.iter_mut().find(|(k, _)| *k == key) {
            Some(member) => member.1 = value,
            None => members.push((key, value)),
        }
        p.skip(|b| b == b' ' || b == b'\t');
        if p.done() {
            return Some(members);
        }
        if !p.eat(b',') {
            return None;
        }
        p.skip(|b| b == b' ' || b == b'\t');
        if p.done() {
            return None; // a trailing comma
        }
    }
    Some(members)
}

/// Reads a structured-field dictionary (RFC 8941) octet by octet.
struct DictionaryParser<'a> {
    /// The field's octets.
    s: &'a [u8],
    /// The next octet to read.
    i: usize,
}

impl<'a> DictionaryParser<'a> {
    /// Whether every octet was read.
    fn done(&self) -> bool {
        self.i >= self.s.len()
    }

    /// The next octet, not consumed.
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    /// Consumes `b` if it is next.
    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        if hit {
            self.i += 1;
        }
        hit
    }

    /// Consumes the octets `what` accepts.
    fn skip(&mut self, what: impl Fn(u8) -> bool) {
        while self.peek().is_some_and(&what) {
            self.i += 1;
        }
    }

    /// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`
    fn key(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        if !self
            .peek()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'*')
        {
            return None;
        }
        self.skip(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b));
        Some(&self.s[start..self.i])
    }

    /// `*( ";" *SP key [ "=" bare-item ] )`
    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip(|b| b == b' ');
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    /// `"(" *SP [ item *( 1*SP item ) *SP ] ")" parameters`
    fn inner_list(&mut self) -> Option<()> {
        self.eat(b'(');
        loop {
            self.skip(|b| b == b' ');
            if self.eat(b')') {
                return self.parameters();
            }
            self.bare_item()?;
            self.parameters()?;
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return None;
            }
        }
    }

    /// A bare item: a token, a boolean, an integer or a quoted string.
    fn bare_item(&mut self) -> Option<Value<'a>> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number().map(|_| Value::Other),
            b'"' => self.string().map(|_| Value::Other),
            b'*' | b'A'..=b'Z' | b'a'..=b'z' => {
                let start = self.i;
                self.i += 1;
                self.skip(|b| is_tchar(b) || b == b':' || b == b'/');
                Some(Value::Token(&self.s[start..self.i]))
            }
            b':' => {
                self.i += 1;
                self.skip(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b));
                self.eat(b':').then_some(Value::Other)
            }
            b'?' => {
                self.i += 1;
                (self.eat(b'0') || self.eat(b'1')).then_some(Value::Other)
            }
            b'@' => {
                self.i += 1;
                let start = self.i;
                self.number()?;
                // A Date is an Integer: no fraction.
                (!self.s[start..self.i].contains(&b'.')).then_some(Value::Other)
            }
            b'%' => {
                self.i += 1;
                self.display_string().map(|_| Value::Other)
            }
            _ => None,
        }
    }

    /// An Integer (at most 15 digits) or a Decimal (at most 12 integer and 3 fraction
    /// digits), RFC 9651 §4.2.4.
    fn number(&mut self) -> Option<()> {
        self.eat(b'-');
        let start = self.i;
        self.skip(|b| b.is_ascii_digit());
        let int = self.i - start;
        if int == 0 {
            return None;
        }
        if self.eat(b'.') {
            let frac_start = self.i;
            self.skip(|b| b.is_ascii_digit());
            let frac = self.i - frac_start;
            (int <= 12 && (1..=3).contains(&frac)).then_some(())
        } else {
            (int <= 15).then_some(())
        }
    }

    /// `DQUOTE *( unescaped / "%x20-7E except DQUOTE and \" / escaped ) DQUOTE`
    fn string(&mut self) -> Option<()> {
        self.eat(b'"');
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => {
                    self.i += 1;
                    if !matches!(self.peek()?, b'"' | b'\\') {
                        return None;
                    }
                    self.i += 1;
                }
                0x20..=0x7e => self.i += 1,
                _ => return None,
            }
        }
    }

    /// `%"…"`: printable ASCII and lowercase `%xx` escapes that decode to UTF-8.
    fn display_string(&mut self) -> Option<()> {
        if !self.eat(b'"') {
            return None;
        }
        let mut decoded = Vec::new();
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return std::str::from_utf8(&decoded).is_ok().then_some(());
                }
                b'%' => {
                    let hex = self.s.get(self.i + 1..self.i + 3)?;
                    let digit = |b: u8| match b {
                        b'0'..=b'9' => Some(b - b'0'),
                        b'a'..=b'f' => Some(b - b'a' + 10),
                        _ => None,
                    };
                    decoded.push(digit(hex[0])? << 4 | digit(hex[1])?);
                    self.i += 3;
                }
                b @ 0x20..=0x7e => {
                    decoded.push(b);
                    self.i += 1;
                }
                _ => return None,
            }
        }
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(input: &str) -> Option<Vec<(String, Option<String>)>> {
        parse(input.as_bytes()).map(|members| {
            members
                .into_iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::Token(t) => Some(String::from_utf8_lossy(t).into_owned()),
                        Value::Other => None,
                    };
                    (String::from_utf8_lossy(k).into_owned(), v)
                })
                .collect()
        })
    }

    fn t(k: &str, v: &str) -> (String, Option<String>) {
        (k.into(), Some(v.into()))
    }

    #[test]
    fn preference_statements() {
        assert_eq!(
            tokens("train-ai=n, search=y"),
            Some(vec![t("train-ai", "n"), t("search", "y")])
        );
        assert_eq!(
            tokens("search=yes,ai-train=no,use=reference"),
            Some(vec![
                t("search", "yes"),
                t("ai-train", "no"),
                t("use", "reference")
            ])
        );
        assert_eq!(tokens(""), Some(vec![]));
        assert_eq!(tokens("  train-ai=n  "), Some(vec![t("train-ai", "n")]));
        // The last of a repeated key wins, keeping the first one's place.
        assert_eq!(
            tokens("train-ai=y, search=n, train-ai=n"),
            Some(vec![t("train-ai", "n"), t("search", "n")])
        );
    }

    #[test]
    fn the_vocabulary_drafts_examples() {
        // vocab §6.4.1: every preference unknown — the last values are not Tokens.
        assert_eq!(
            tokens(r#"train-ai=y, train-ai, search=n, search="n""#),
            Some(vec![("train-ai".into(), None), ("search".into(), None)])
        );
        // vocab §6.4.2: parameters are ignored; the last value wins.
        assert_eq!(
            tokens("train-ai;allow=n, train-ai=y"),
            Some(vec![t("train-ai", "y")])
        );
        assert_eq!(
            tokens(r#"train-ai;has;parameters="?";"#),
            None,
            "a `;` must be followed by a key"
        );
        assert_eq!(
            tokens(r#"train-ai;has;parameters="?""#),
            Some(vec![("train-ai".into(), None)])
        );
    }

    #[test]
    fn every_bare_item_type_parses() {
        let all = r#"a=1, b=-2.5, c="s\"q", d=tok/en:x, e=:aGk=:, f=?0, g=@1700000000, h=%"caf%c3%a9", i=(1 "x" y);p=1, j"#;
        let members = tokens(all).expect("valid");
        assert_eq!(members.len(), 10);
        assert_eq!(members[3], t("d", "tok/en:x"));
    }

    #[test]
    fn invalid_dictionaries_fail_whole() {
        for bad in [
            "Train-ai=n",
            "train-ai=n,",
            "train-ai=n,,search=y",
            "train-ai=n search=y",
            "train-ai==n",
            "train-ai=\"open",
            "a=1234567890123456",
            "a=1.2345",
            "a=1.",
            "a=?2",
            "a=@1.5",
            "a=%\"caf%C3\"",
            "a=%\"%ff\"",
            "a=(1 2",
            "a=(1\"x\")",
            "=n",
            "a=n;",
            "a=\u{e9}",
        ] {
            assert_eq!(tokens(bad), None, "{bad}");
        }
    }
}
