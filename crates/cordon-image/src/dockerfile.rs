//! Reading a Dockerfile: instructions with their line numbers, `\` continuations, comments,
//! JSON (exec) forms, and `$VAR` / `${VAR}` / `${VAR:-default}` / `${VAR:+alt}` substitution.
//!
//! Threat model: the Dockerfile is hostile input (an agent wrote it, or a repository it
//! cloned). It is read through a size cap ([`MAX_DOCKERFILE`]) so a 1 GB line is refused
//! before it is held in memory, and at most [`MAX_INSTRUCTIONS`] instructions are taken; what
//! the parser does not know is refused by name with its line, never skipped.
//!
//! Why a parser of our own rather than a crate: the `dockerfile-parser` crate (pest-based)
//! has had no release since 2022, brings a grammar generator into the build, and parses
//! instructions this builder refuses anyway; the subset cordon builds (no heredocs, no
//! parser directives but `syntax`, the default `\` escape) is a line format that takes less
//! code to read exactly than to adapt.

use std::io::Read;

use crate::error::ImageError;

/// Largest Dockerfile read.
pub const MAX_DOCKERFILE: u64 = 1 << 20;
/// Most instructions one Dockerfile may have (overlayfs stacks at most 500 layers anyway).
pub const MAX_INSTRUCTIONS: usize = 1000;

/// One instruction as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    /// 1-based line it starts on.
    pub line: usize,
    /// Upper case: `RUN`, `COPY`, ….
    pub keyword: String,
    /// Everything after the keyword, continuations joined with a space.
    pub args: String,
}

impl Instruction {
    /// The JSON (exec) form, when the arguments are a JSON array of strings.
    pub fn json(&self) -> Option<Vec<String>> {
        let t = self.args.trim();
        if !t.starts_with('[') {
            return None;
        }
        serde_json::from_str::<Vec<String>>(t).ok()
    }

    /// The instruction as progress shows it (cut at 80 characters).
    pub fn display(&self) -> String {
        let s = format!("{} {}", self.keyword, self.args);
        if s.chars().count() > 80 {
            format!("{}…", s.chars().take(79).collect::<String>())
        } else {
            s
        }
    }
}

fn bad(line: usize, why: impl Into<String>) -> ImageError {
    ImageError::format(format!("Dockerfile line {line}"), why)
}

/// Reads and parses a Dockerfile from `r` (at most [`MAX_DOCKERFILE`] bytes).
pub fn read(r: impl Read) -> Result<Vec<Instruction>, ImageError> {
    let mut bytes = Vec::new();
    r.take(MAX_DOCKERFILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ImageError::io("reading the Dockerfile", e))?;
    if bytes.len() as u64 > MAX_DOCKERFILE {
        return Err(ImageError::Limit(format!(
            "the Dockerfile is larger than {MAX_DOCKERFILE} bytes (refused unread)"
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| ImageError::format("the Dockerfile", "not UTF-8 text"))?;
    parse(&text)
}

/// Parses Dockerfile text.
pub fn parse(text: &str) -> Result<Vec<Instruction>, ImageError> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut directives_open = true;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_end_matches('\r');
        let trimmed = line.trim_start();
        if let Some(comment) = trimmed.strip_prefix('#') {
            if directives_open && current.is_none() {
                if let Some(d) = comment.trim().split_once('=') {
                    let key = d.0.trim().to_ascii_lowercase();
                    if key == "escape" && d.1.trim() != "\\" {
                        return Err(bad(
                            n,
                            "the `escape` parser directive is not supported (only the default \\)",
                        ));
                    }
                    if key == "escape" || key == "syntax" || key == "check" {
                        continue;
                    }
                }
            }
            // A comment, also inside a continuation (Docker drops those lines too).
            continue;
        }
        directives_open = false;
        if trimmed.is_empty() {
            continue;
        }
        let (body, continues) = match line.trim_end().strip_suffix('\\') {
            Some(b) => (b, true),
            None => (line, false),
        };
        match &mut current {
            Some((_, acc)) => {
                acc.push(' ');
                acc.push_str(body.trim());
            }
            None => current = Some((n, body.trim().to_string())),
        }
        if !continues {
            if let Some((start, text)) = current.take() {
                out.push(instruction(start, &text)?);
                if out.len() > MAX_INSTRUCTIONS {
                    return Err(ImageError::Limit(format!(
                        "the Dockerfile has more than {MAX_INSTRUCTIONS} instructions (refused)"
                    )));
                }
            }
        }
    }
    if let Some((start, text)) = current.take() {
        out.push(instruction(start, &text)?);
    }
    if out.len() > MAX_INSTRUCTIONS {
        return Err(ImageError::Limit(format!(
            "the Dockerfile has more than {MAX_INSTRUCTIONS} instructions (refused)"
        )));
    }
    Ok(out)
}

fn instruction(line: usize, text: &str) -> Result<Instruction, ImageError> {
    let (kw, rest) = match text.find(char::is_whitespace) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, ""),
    };
    if kw.is_empty() || !kw.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(bad(
            line,
            format!(
                "{:?} is not an instruction",
                kw.chars().take(40).collect::<String>()
            ),
        ));
    }
    if rest.contains("<<") && matches!(kw.to_ascii_uppercase().as_str(), "RUN" | "COPY" | "ADD") {
        let heredoc = rest
            .split_whitespace()
            .any(|w| w.starts_with("<<") && w.len() > 2 && !w.starts_with("<<<"));
        if heredoc {
            return Err(bad(line, "heredocs (<<EOF) are not supported"));
        }
    }
    Ok(Instruction {
        line,
        keyword: kw.to_ascii_uppercase(),
        args: rest.to_string(),
    })
}

/// Substitutes `$NAME`, `${NAME}`, `${NAME:-word}` and `${NAME:+word}` from `lookup`
/// (unknown names become empty, as in Docker); `\$` is a literal `$`.
pub fn expand(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\\' if it.peek() == Some(&'$') => {
                out.push('$');
                it.next();
            }
            '$' => match it.peek() {
                Some('{') => {
                    it.next();
                    let mut inner = String::new();
                    let mut closed = false;
                    for c in it.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        inner.push(c);
                    }
                    if !closed {
                        return Err(format!("unterminated ${{ in {s:?}"));
                    }
                    let (name, op) = match inner.find(':') {
                        Some(i) => (&inner[..i], Some(&inner[i..])),
                        None => (inner.as_str(), None),
                    };
                    let v = lookup(name).filter(|v| !v.is_empty());
                    match op {
                        None => out.push_str(&v.unwrap_or_default()),
                        Some(o) if o.starts_with(":-") => {
                            out.push_str(&v.unwrap_or_else(|| o[2..].to_string()))
                        }
                        Some(o) if o.starts_with(":+") => {
                            if v.is_some() {
                                out.push_str(&o[2..])
                            }
                        }
                        Some(o) => return Err(format!("unsupported substitution ${{{name}{o}}}")),
                    }
                }
                Some(&c) if c == '_' || c.is_ascii_alphabetic() => {
                    let mut name = String::new();
                    while let Some(&c) = it.peek() {
                        if c == '_' || c.is_ascii_alphanumeric() {
                            name.push(c);
                            it.next();
                        } else {
                            break;
                        }
                    }
                    out.push_str(&lookup(&name).unwrap_or_default());
                }
                _ => out.push('$'),
            },
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Splits arguments into words, honouring double and single quotes (ENV, LABEL, COPY).
pub fn words(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut it = s.chars();
    while let Some(c) = it.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = it.next() {
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(n) = it.next() {
                    cur.push(n);
                    in_word = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(format!("unterminated quote in {s:?}"));
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// `KEY=VALUE …` pairs (or the legacy `KEY VALUE` form) of ENV, LABEL and ARG.
pub fn pairs(s: &str, legacy: bool) -> Result<Vec<(String, Option<String>)>, String> {
    let t = s.trim();
    let first = t.split_whitespace().next().unwrap_or("");
    if legacy && !first.contains('=') {
        let rest = t[first.len()..].trim();
        if rest.is_empty() {
            return Err(format!("{first} has no value"));
        }
        return Ok(vec![(first.to_string(), Some(rest.to_string()))]);
    }
    words(t)?
        .into_iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), Some(v.to_string()))),
            Some(_) => Err(format!("{w:?} has no name")),
            None => Ok((w, None)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_join_and_comments_inside_them_are_dropped() {
        let d =
            parse("FROM a\n# c\nRUN echo 1 \\\n  # inner\n  && echo 2\n\nCMD [\"sh\"]\n").unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(d[1].keyword, "RUN");
        assert_eq!(d[1].line, 3);
        assert_eq!(d[1].args, "echo 1 && echo 2");
        assert_eq!(d[2].json(), Some(vec!["sh".to_string()]));
    }

    #[test]
    fn too_many_instructions_and_huge_files_are_refused() {
        let text = "RUN true\n".repeat(MAX_INSTRUCTIONS + 1);
        assert!(parse(&text).unwrap_err().to_string().contains("more than"));
        let big = vec![b'a'; (MAX_DOCKERFILE + 10) as usize];
        assert!(read(&big[..])
            .unwrap_err()
            .to_string()
            .contains("larger than"));
    }

    #[test]
    fn heredocs_and_non_instructions_are_refused_with_their_line() {
        let e = parse("FROM a\nRUN <<EOF\nx\nEOF\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("heredoc"), "{e}");
        let e = parse("FROM a\n12 x\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn variables_expand_with_defaults() {
        let look = |n: &str| (n == "A").then(|| "x".to_string());
        assert_eq!(
            expand("$A/${A}/${B:-d}/${A:+y}/\\$A", &look).unwrap(),
            "x/x/d/y/$A"
        );
        assert_eq!(
            pairs("A=1 B=\"two words\"", true).unwrap(),
            vec![
                ("A".into(), Some("1".into())),
                ("B".into(), Some("two words".into()))
            ]
        );
        assert_eq!(
            pairs("A one two", true).unwrap(),
            vec![("A".into(), Some("one two".into()))]
        );
    }
}
