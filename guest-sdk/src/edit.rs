//! The matching and applying rules every kiln edit format shares, as pure Rust: a SEARCH text
//! is located through normalisation tiers (exact → line endings/BOM → trailing whitespace →
//! indentation offset → Unicode look-alikes → copied line numbers); at each tier one match is
//! applied, several are refused as ambiguous, none moves to the next tier. The replacement is
//! re-indented by the detected offset and written with the file's own line endings, BOM and
//! final newline. Errors are worded for an LLM to act on, and their wording is stable.

/// The tier that located a SEARCH text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// SEARCH occurs in the file byte for byte.
    Exact,
    /// After normalising CRLF to LF and dropping a BOM.
    LineEndings,
    /// Ignoring trailing whitespace on each line.
    TrailingWhitespace,
    /// With a uniform indentation offset (the replacement is re-indented by it).
    Indentation,
    /// Treating curly quotes, dashes and non-breaking spaces as their ASCII look-alikes.
    Unicode,
    /// After removing line-number prefixes copied from a numbered listing.
    LineNumbers,
}

impl Tier {
    /// Stable name (`exact`, `line-endings`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Tier::Exact => "exact",
            Tier::LineEndings => "line-endings",
            Tier::TrailingWhitespace => "trailing-whitespace",
            Tier::Indentation => "indentation",
            Tier::Unicode => "unicode",
            Tier::LineNumbers => "line-numbers",
        }
    }
}

/// A successful application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The new text of the file.
    pub text: String,
    /// The tier that matched; `None` when no search was needed.
    pub tier: Option<Tier>,
    /// True when the edit was already applied and nothing changed.
    pub already_applied: bool,
}

/// Why an edit could not be applied; the message is meant for the LLM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// SEARCH occurs nowhere.
    NoMatch(String),
    /// SEARCH occurs in several places.
    Ambiguous(String),
    /// The edit does not fit the file.
    Invalid(String),
}

impl Failure {
    /// The text to show the model, whatever the kind of failure.
    pub fn message(&self) -> &str {
        match self {
            Failure::NoMatch(m) | Failure::Ambiguous(m) | Failure::Invalid(m) => m,
        }
    }
}

/// A file's text split into its conventions and an LF body.
struct Doc {
    bom: bool,
    crlf: bool,
    final_newline: bool,
    body: String,
}

impl Doc {
    fn parse(text: &str) -> Doc {
        let bom = text.starts_with('\u{feff}');
        let t = text.strip_prefix('\u{feff}').unwrap_or(text);
        let crlf = t.contains("\r\n");
        let body = if crlf {
            t.replace("\r\n", "\n")
        } else {
            t.to_string()
        };
        Doc {
            bom,
            crlf,
            final_newline: body.ends_with('\n'),
            body,
        }
    }

    /// Render `body` with this document's conventions.
    fn render(&self, body: &str) -> String {
        let mut b = body.to_string();
        if !b.is_empty() {
            if self.final_newline && !b.ends_with('\n') {
                b.push('\n');
            } else if !self.final_newline && b.ends_with('\n') && !self.body.is_empty() {
                b.pop();
            }
        }
        let b = if self.crlf {
            b.replace('\n', "\r\n")
        } else {
            b
        };
        if self.bom { format!("\u{feff}{b}") } else { b }
    }
}

fn lf(s: &str) -> String {
    s.strip_prefix('\u{feff}')
        .unwrap_or(s)
        .replace("\r\n", "\n")
}

/// Positions (byte offsets) of every occurrence of `needle`, overlapping ones included.
fn find_all(hay: &str, needle: &str) -> Vec<usize> {
    let mut out = Vec::new();
    if needle.is_empty() {
        return out;
    }
    let mut start = 0;
    while let Some(i) = hay[start..].find(needle) {
        out.push(start + i);
        start += i + hay[start + i..].chars().next().map_or(1, char::len_utf8);
    }
    out
}

fn line_of(body: &str, byte: usize) -> usize {
    body[..byte].matches('\n').count() + 1
}

/// The ASCII look-alike of a typographic character (curly quotes, dashes, special spaces).
fn fold_char(c: char) -> char {
    match c {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' => '\'',
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' => '"',
        '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
        | '\u{2212}' => '-',
        '\u{00A0}' | '\u{2007}' | '\u{202F}' | '\u{2009}' | '\u{200A}' | '\u{3000}' => ' ',
        c => c,
    }
}

/// Replace typographic look-alikes with ASCII.
pub fn fold_unicode(s: &str) -> String {
    s.chars().map(fold_char).collect()
}

fn has_lookalike(s: &str) -> bool {
    s.chars().any(|c| !c.is_ascii() && fold_char(c) != c)
}

/// Strip a line-number prefix such as `12 | `, `12: `, `  12\t` or `L12: `.
fn strip_line_number(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let t = t.strip_prefix('L').unwrap_or(t);
    let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    let rest = &t[digits..];
    for sep in [" | ", "| ", " |", "|", ": ", ":", "\t", "  ", " "] {
        if let Some(r) = rest.strip_prefix(sep) {
            return Some(r);
        }
    }
    if rest.is_empty() { Some("") } else { None }
}

fn indent_of(s: &str) -> &str {
    &s[..s.len() - s.trim_start_matches([' ', '\t']).len()]
}

/// How search lines relate to file lines at a match (tiers 4+).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Offset {
    None,
    /// The file is indented by this much more than SEARCH.
    Add(String),
    /// The file is indented by this much less than SEARCH.
    Remove(String),
}

struct LineMatch {
    start: usize,
    offset: Offset,
}

/// Try the line-based tiers: compare `search` lines against `file` lines.
fn line_matches(file: &[String], search: &[String], tier: Tier) -> Vec<LineMatch> {
    let n = search.len();
    let mut out = Vec::new();
    if n == 0 || n > file.len() || search.iter().all(|l| l.trim().is_empty()) {
        return out;
    }
    let first = search.iter().position(|l| !l.trim().is_empty()).unwrap();
    for start in 0..=file.len() - n {
        let offset = if tier >= Tier::Indentation {
            let fi = indent_of(&file[start + first]);
            let si = indent_of(&search[first]);
            if let Some(extra) = fi.strip_prefix(si) {
                if extra.is_empty() {
                    Offset::None
                } else {
                    Offset::Add(extra.to_string())
                }
            } else if let Some(less) = si.strip_prefix(fi) {
                Offset::Remove(less.to_string())
            } else {
                continue;
            }
        } else {
            Offset::None
        };
        let ok = (0..n).all(|k| {
            let f = file[start + k].trim_end();
            let s = search[k].trim_end();
            if s.is_empty() {
                return f.trim().is_empty();
            }
            match &offset {
                Offset::None => f == s,
                Offset::Add(extra) => f.strip_prefix(extra.as_str()) == Some(s),
                Offset::Remove(less) => s.strip_prefix(less.as_str()) == Some(f),
            }
        });
        if ok {
            out.push(LineMatch { start, offset });
        }
    }
    out
}

fn reindent(lines: &[String], offset: &Offset) -> Vec<String> {
    lines
        .iter()
        .map(|l| match offset {
            _ if l.trim().is_empty() => l.clone(),
            Offset::None => l.clone(),
            Offset::Add(extra) => format!("{extra}{l}"),
            Offset::Remove(less) => l
                .strip_prefix(less.as_str())
                .unwrap_or(l.trim_start())
                .to_string(),
        })
        .collect()
}

/// Lines of an LF text; a final newline ends the last line rather than starting a new one
/// (`""` → none, `"\n"` → one empty line).
fn split_lines(s: &str) -> Vec<String> {
    if s.is_empty() {
        return Vec::new();
    }
    s.strip_suffix('\n')
        .unwrap_or(s)
        .split('\n')
        .map(String::from)
        .collect()
}

/// Where SEARCH was found: a byte range of the body, or a line range.
enum Found {
    Bytes(usize, usize),
    Lines(usize, usize, Offset),
}

/// Lines of the body, split once and only when a line-based tier needs them.
struct Lines<'a> {
    body: &'a str,
    plain: std::cell::OnceCell<Vec<String>>,
    folded: std::cell::OnceCell<Vec<String>>,
}

impl<'a> Lines<'a> {
    fn new(body: &'a str) -> Self {
        Lines {
            body,
            plain: Default::default(),
            folded: Default::default(),
        }
    }
    fn plain(&self) -> &[String] {
        self.plain.get_or_init(|| split_lines(self.body))
    }
    fn folded(&self) -> &[String] {
        self.folded
            .get_or_init(|| self.plain().iter().map(|l| fold_unicode(l)).collect())
    }
}

/// Locate `search` in the body (LF), tier by tier. Returns the tier and every match of the
/// first tier that has any.
fn locate(
    doc: &Doc,
    raw_text: &str,
    search_raw: &str,
    lines: &Lines<'_>,
) -> Option<(Tier, Vec<Found>)> {
    let body = doc.body.as_str();
    let s = lf(search_raw);
    let raw_is_body = !doc.bom && !doc.crlf;
    let exact_hits = if raw_is_body && s == search_raw {
        find_all(body, &s)
    } else {
        find_all(raw_text, search_raw)
    };
    if !exact_hits.is_empty() {
        let in_body = if raw_is_body && s == search_raw {
            exact_hits.clone()
        } else {
            find_all(body, &s)
        };
        if in_body.len() == exact_hits.len() {
            return Some((
                Tier::Exact,
                in_body
                    .into_iter()
                    .map(|i| Found::Bytes(i, i + s.len()))
                    .collect(),
            ));
        }
    }
    let norm = if raw_is_body && s == search_raw {
        Vec::new()
    } else {
        find_all(body, &s)
    };
    if !norm.is_empty() {
        return Some((
            Tier::LineEndings,
            norm.into_iter()
                .map(|i| Found::Bytes(i, i + s.len()))
                .collect(),
        ));
    }
    let search_lines = split_lines(&s);
    let folded_search: Vec<String> = search_lines.iter().map(|l| fold_unicode(l)).collect();
    let numbered: Option<Vec<String>> = {
        let nonblank: Vec<&String> = folded_search
            .iter()
            .filter(|l| !l.trim().is_empty())
            .collect();
        if !nonblank.is_empty() && nonblank.iter().all(|l| strip_line_number(l).is_some()) {
            Some(
                folded_search
                    .iter()
                    .map(|l| strip_line_number(l).unwrap_or(l).to_string())
                    .collect(),
            )
        } else {
            None
        }
    };
    for tier in [
        Tier::TrailingWhitespace,
        Tier::Indentation,
        Tier::Unicode,
        Tier::LineNumbers,
    ] {
        let (f, sl): (&[String], &[String]) = match tier {
            Tier::TrailingWhitespace | Tier::Indentation => (lines.plain(), &search_lines),
            Tier::Unicode => {
                if folded_search == search_lines && !has_lookalike(lines.body) {
                    continue;
                }
                (lines.folded(), &folded_search)
            }
            _ => match &numbered {
                Some(n) => (lines.folded(), n),
                None => continue,
            },
        };
        let m = line_matches(f, sl, tier);
        if !m.is_empty() {
            let n = sl.len();
            return Some((
                tier,
                m.into_iter()
                    .map(|x| Found::Lines(x.start, x.start + n, x.offset))
                    .collect(),
            ));
        }
    }
    None
}

fn found_line(body: &str, f: &Found) -> usize {
    match f {
        Found::Bytes(a, _) => line_of(body, *a),
        Found::Lines(a, _, _) => a + 1,
    }
}

fn found_byte_range(body: &str, file_lines: &[String], f: &Found) -> (usize, usize) {
    match f {
        Found::Bytes(a, b) => (*a, *b),
        Found::Lines(a, b, _) => {
            let start: usize = file_lines[..*a].iter().map(|l| l.len() + 1).sum();
            let len: usize = file_lines[*a..*b].iter().map(|l| l.len() + 1).sum();
            (start, (start + len).min(body.len()))
        }
    }
}

/// Apply one SEARCH/REPLACE edit to `text`. `block` (1-based) and `path` are used in messages.
pub fn apply_search_replace(
    path: &str,
    text: &str,
    search: &str,
    replace: &str,
    block: usize,
) -> Result<Applied, Failure> {
    let doc = Doc::parse(text);
    if search.trim().is_empty() {
        if doc.body.trim().is_empty() {
            let new = lf(replace);
            return Ok(Applied {
                already_applied: false,
                text: render_new(&doc, &new),
                tier: None,
            });
        }
        if lf(replace).trim_end() == doc.body.trim_end() {
            return Ok(Applied {
                text: text.to_string(),
                tier: None,
                already_applied: true,
            });
        }
        return Err(Failure::Invalid(format!(
            "block {block}: an empty SEARCH creates a new file, but {path} already exists and is not empty; put the lines to change in SEARCH"
        )));
    }
    let lines = Lines::new(&doc.body);
    let replace_lf = lf(replace);
    let located = locate(&doc, text, search, &lines);
    // REPLACE is only looked for when it could show the edit as already applied: SEARCH
    // found nowhere, or SEARCH contained in REPLACE (an insertion anchored on kept lines).
    let squash = |s: &str| {
        fold_unicode(s)
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("\n")
    };
    // An edit that changes only whitespace or look-alike characters matches its own REPLACE
    // at a tolerant tier wherever its SEARCH matches: that proves nothing, so it is applied
    // (and counts as already applied only if applying it changes nothing).
    let cosmetic = squash(&replace_lf) == squash(&lf(search));
    let replace_spans = if replace_lf.trim().is_empty()
        || (located.is_some() && (cosmetic || !squash(&replace_lf).contains(&squash(&lf(search)))))
    {
        None
    } else {
        locate(&doc, text, replace, &lines)
    };
    match located {
        Some((tier, found)) => {
            // Already applied: every SEARCH match lies inside the one copy of REPLACE.
            if let Some((_, rs)) = &replace_spans
                && rs.len() == 1
            {
                let (ra, rb) = found_byte_range(&doc.body, lines.plain(), &rs[0]);
                if found.iter().all(|f| {
                    let (a, b) = found_byte_range(&doc.body, lines.plain(), f);
                    a >= ra && b <= rb
                }) {
                    return Ok(Applied {
                        text: text.to_string(),
                        tier: Some(tier),
                        already_applied: true,
                    });
                }
            }
            if found.len() > 1 {
                return Err(ambiguous(path, block, &doc.body, lines.plain(), &found));
            }
            let new_body = match &found[0] {
                Found::Bytes(a, b) => {
                    let mut s = String::with_capacity(doc.body.len() + replace_lf.len());
                    s.push_str(&doc.body[..*a]);
                    s.push_str(&replace_lf);
                    s.push_str(&doc.body[*b..]);
                    s
                }
                Found::Lines(a, b, offset) => {
                    let mut rl = split_lines(&replace_lf);
                    if tier == Tier::LineNumbers {
                        let nonblank: Vec<&String> =
                            rl.iter().filter(|l| !l.trim().is_empty()).collect();
                        if !nonblank.is_empty()
                            && nonblank.iter().all(|l| strip_line_number(l).is_some())
                        {
                            rl = rl
                                .iter()
                                .map(|l| strip_line_number(l).unwrap_or(l).to_string())
                                .collect();
                        }
                    }
                    let reindented = reindent(&rl, offset);
                    let file_lines = lines.plain();
                    let mut search_lines = split_lines(&lf(search));
                    if tier == Tier::LineNumbers {
                        search_lines = search_lines
                            .iter()
                            .map(|l| strip_line_number(l).unwrap_or(l).to_string())
                            .collect();
                    }
                    let rl =
                        keep_unchanged_lines(&file_lines[*a..*b], &search_lines, &rl, reindented);
                    let mut new_lines: Vec<String> = file_lines[..*a].to_vec();
                    new_lines.extend(rl);
                    new_lines.extend_from_slice(&file_lines[*b..]);
                    let mut s = new_lines.join("\n");
                    if doc.final_newline && !new_lines.is_empty() {
                        s.push('\n');
                    }
                    s
                }
            };
            let already_applied = new_body == doc.body;
            Ok(Applied {
                text: if already_applied {
                    text.to_string()
                } else {
                    render_new(&doc, &new_body)
                },
                tier: Some(tier),
                already_applied,
            })
        }
        None => {
            if let Some((tier, rs)) = replace_spans
                && rs.len() == 1
            {
                return Ok(Applied {
                    text: text.to_string(),
                    tier: Some(tier),
                    already_applied: true,
                });
            }
            Err(no_match(path, block, lines.plain(), search))
        }
    }
}

/// The replacement lines of a line-tier match, where every line REPLACE keeps from SEARCH
/// (byte-identical to its SEARCH line) is the file's own line: an edit located despite
/// whitespace or look-alike differences changes only the lines it changes and never adds or
/// drops whitespace elsewhere. Every other line comes from REPLACE as written, so a change
/// that is only trailing whitespace is applied, not undone. SEARCH and REPLACE lines are
/// paired by `similar`'s Myers diff (a longest common subsequence).
fn keep_unchanged_lines(
    file: &[String],
    search: &[String],
    replace: &[String],
    mut out: Vec<String>,
) -> Vec<String> {
    let ops = similar::capture_diff_slices(similar::Algorithm::Myers, search, replace);
    for op in ops {
        if let similar::DiffOp::Equal {
            old_index,
            new_index,
            len,
        } = op
        {
            for k in 0..len {
                if let (Some(own), Some(slot)) =
                    (file.get(old_index + k), out.get_mut(new_index + k))
                {
                    *slot = own.clone();
                }
            }
        }
    }
    out
}

/// Render a new body with the file's conventions (a new or emptied file keeps the body's own).
fn render_new(doc: &Doc, body: &str) -> String {
    if doc.body.is_empty() {
        let d = Doc {
            final_newline: body.ends_with('\n'),
            body: String::new(),
            ..*doc
        };
        return d.render(body);
    }
    doc.render(body)
}

fn ambiguous(
    path: &str,
    block: usize,
    body: &str,
    file_lines: &[String],
    found: &[Found],
) -> Failure {
    let lines: Vec<usize> = found.iter().map(|f| found_line(body, f)).collect();
    let shown: Vec<String> = lines.iter().take(5).map(|n| n.to_string()).collect();
    let mut msg = format!(
        "block {block}: SEARCH matches {} places in {path} (lines {}{}); add surrounding lines so it matches exactly one:",
        lines.len(),
        shown.join(", "),
        if lines.len() > 5 { ", ..." } else { "" }
    );
    for n in lines.iter().take(5) {
        let text = file_lines.get(n - 1).map(String::as_str).unwrap_or("");
        msg.push_str(&format!("\n{n:>5} | {text}"));
    }
    Failure::Ambiguous(msg)
}

fn no_match(path: &str, block: usize, file_lines: &[String], search: &str) -> Failure {
    let search_lines = split_lines(&lf(search));
    let key = |s: &str| fold_unicode(s.trim());
    let n = search_lines.len().max(1);
    let mut best = (0usize, 0usize);
    if !file_lines.is_empty() {
        for start in 0..=file_lines.len().saturating_sub(n) {
            let score = (0..n)
                .filter(|k| {
                    let f = file_lines.get(start + k).map(|l| key(l));
                    let s = search_lines.get(*k).map(|l| key(l));
                    f.is_some() && f == s && !s.as_deref().unwrap_or("").is_empty()
                })
                .count();
            if score > best.1 {
                best = (start, score);
            }
        }
    }
    let mut msg = format!("block {block}: SEARCH does not match {path}.");
    if best.1 == 0 {
        msg.push_str(
            " No line of it occurs in the file; copy the lines to change exactly from the file.",
        );
        return Failure::NoMatch(msg);
    }
    let (start, _) = best;
    let end = (start + n).min(file_lines.len());
    msg.push_str(&format!(" The closest lines are {}-{}:", start + 1, end));
    for (i, line) in file_lines[start..end].iter().enumerate().take(30) {
        msg.push_str(&format!("\n{:>5} | {line}", start + i + 1));
    }
    for k in 0..n {
        let f = file_lines.get(start + k).map(String::as_str).unwrap_or("");
        let s = search_lines.get(k).map(String::as_str).unwrap_or("");
        if f.trim_end() != s.trim_end() {
            msg.push_str(&format!(
                "\nFirst difference at line {}: the file has `{}` but SEARCH has `{}`.",
                start + k + 1,
                f,
                s
            ));
            break;
        }
    }
    Failure::NoMatch(msg)
}

/// Give whole new content the conventions (line endings, BOM, final newline) of `old`.
pub fn conform(old: &str, new: &str) -> String {
    let doc = Doc::parse(old);
    render_new(&doc, &lf(new))
}

/// Strip the decorations LLMs put around a path line (`**a.c**`, `` `a.c` ``, `# a.c`, `a.c:`).
pub fn clean_path(line: &str) -> Option<String> {
    let p = line
        .trim_start_matches('#')
        .trim()
        .trim_matches(|c| c == '*' || c == '`')
        .trim_end_matches(':')
        .trim();
    let p = p
        .strip_prefix("File:")
        .or_else(|| p.strip_prefix("file:"))
        .unwrap_or(p)
        .trim();
    if p.is_empty() || p.contains(char::is_whitespace) || p.ends_with('.') {
        return None;
    }
    Some(p.to_string())
}

/// The tags models use instead of backtick fences (as seen in Aider's transcripts), each
/// optionally followed by a language: `<source python>` … `</source>`.
const FENCE_TAGS: [&str; 5] = ["source", "code", "pre", "codeblock", "sourcecode"];

/// A code fence opened by a line: backticks (three or more, optionally a language) or one of
/// [`FENCE_TAGS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// ```` ``` ```` or ```` ```` ```` (the run of backticks that closes it).
    Backticks(String),
    /// `<tag>` or `<tag lang>`, closed by `</tag>`.
    Tag(String),
}

impl Fence {
    /// The fence `line` opens, if it is an opening fence line.
    pub fn open(line: &str) -> Option<Fence> {
        let t = line.trim();
        let ticks: String = t.chars().take_while(|c| *c == '`').collect();
        if ticks.len() >= 3 {
            let lang = &t[ticks.len()..];
            return (!lang.contains('`') && !lang.trim().contains(char::is_whitespace))
                .then_some(Fence::Backticks(ticks));
        }
        let lang_ok = |lang: &str| {
            lang.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+#.-_".contains(c))
        };
        let rest = t.strip_prefix('<')?;
        let (inner, after) = rest.split_once('>')?;
        // `<source python>` (language inside the tag) or `<source>python` (after it, as Aider
        // writes it); not both.
        let mut words = inner.split_whitespace();
        let tag = words.next()?;
        let ok = match (words.next(), words.next()) {
            (None, _) => lang_ok(after),
            (Some(lang), None) => after.is_empty() && lang_ok(lang),
            _ => false,
        };
        (FENCE_TAGS.contains(&tag) && ok).then(|| Fence::Tag(tag.to_string()))
    }

    /// Whether `line` closes this fence.
    pub fn closed_by(&self, line: &str) -> bool {
        let t = line.trim();
        match self {
            Fence::Backticks(ticks) => t == ticks,
            Fence::Tag(tag) => t.strip_prefix("</").and_then(|r| r.strip_suffix('>')) == Some(tag),
        }
    }

    /// Whether `line` opens or closes any fence (such a line never names a file).
    pub fn is_fence_line(line: &str) -> bool {
        let t = line.trim();
        Fence::open(t).is_some()
            || t.starts_with("```")
            || t.strip_prefix("</")
                .and_then(|r| r.strip_suffix('>'))
                .is_some_and(|tag| FENCE_TAGS.contains(&tag))
    }
}

/// Which target a path named by the LLM refers to: an exact target, a unique target with
/// that file name, or the only target when the name is not path-like. With no targets, the
/// name itself.
pub fn resolve_target(named: Option<&str>, targets: &[String]) -> Result<String, String> {
    match named {
        Some(n) if targets.iter().any(|t| t == n) => Ok(n.to_string()),
        Some(n) => {
            let by_name: Vec<&String> = targets
                .iter()
                .filter(|t| t.rsplit('/').next() == Some(n))
                .collect();
            match (by_name.as_slice(), targets) {
                ([one], _) => Ok((*one).clone()),
                (_, [only]) if !looks_like_path(n) => Ok(only.clone()),
                (_, []) => Ok(n.to_string()),
                _ => Err(format!(
                    "{n} is not one of the files you may change ({})",
                    targets.join(", ")
                )),
            }
        }
        None => match targets {
            [only] => Ok(only.clone()),
            _ => Err("put the file's path on the line before its code block".into()),
        },
    }
}

/// Whether a name an LLM wrote looks like a path (has a `/` or a `.`), not a word of prose.
pub fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.contains('.')
}

#[cfg(test)]
mod whitespace_tests {
    use super::{Tier, apply_search_replace};

    #[test]
    fn a_replace_line_differing_only_in_trailing_whitespace_is_applied_as_written() {
        // Located at the trailing-whitespace tier (the file's `a ` vs SEARCH's `a`): the line
        // REPLACE keeps byte for byte is the file's own; the line whose only change is a
        // trailing space (added, as in aider's README, or removed, as in rust-clippy's
        // tests/ui/formatting.rs after `3`) comes from REPLACE as written.
        let file = "a \nlet x = 3 \nb\n";
        let out = apply_search_replace("f.rs", file, "a\nlet x = 3 \nb\n", "a\nlet x = 3\nb\n", 1)
            .unwrap();
        assert_eq!(out.tier, Some(Tier::TrailingWhitespace));
        assert_eq!(out.text, "a \nlet x = 3\nb\n");
        let out = apply_search_replace("f.md", file, "a\nb\n", "a\nb \n", 1).err();
        assert!(
            out.is_some(),
            "SEARCH `a`,`b` is not contiguous in the file"
        );
        let file = "a \nb\n";
        let out = apply_search_replace("f.md", file, "a\nb\n", "a\nb  \n", 1).unwrap();
        assert_eq!(out.text, "a \nb  \n");
        // Look-alike characters: a line REPLACE keeps is the file's own; a changed one is
        // REPLACE's.
        let file = "x = \u{201c}q\u{201d}\ny = 1\n";
        let out =
            apply_search_replace("f.py", file, "x = \"q\"\ny = 1\n", "x = \"q\"\ny = 2 \n", 1)
                .unwrap();
        assert_eq!(out.text, "x = \u{201c}q\u{201d}\ny = 2 \n");
    }

    #[test]
    fn a_trailing_whitespace_match_keeps_the_files_own_whitespace() {
        // Markdown hard breaks (two trailing spaces) and a tab-indented line with a trailing tab.
        let file = "# Title\n\nfirst line  \nsecond line  \n\tcode\t\nlast \n";
        let search = "first line\nsecond line\n\tcode\nlast\n";
        let replace = "first line\nsecond line, changed\n\tcode\nlast\n";
        let out = apply_search_replace("a.md", file, search, replace, 1).unwrap();
        assert_eq!(out.tier, Some(Tier::TrailingWhitespace));
        assert_eq!(
            out.text,
            "# Title\n\nfirst line  \nsecond line, changed\n\tcode\t\nlast \n"
        );
        // An insertion between kept lines.
        let out = apply_search_replace(
            "a.md",
            file,
            "first line\nsecond line\n",
            "first line\ninserted\nsecond line\n",
            1,
        )
        .unwrap();
        assert_eq!(
            out.text,
            "# Title\n\nfirst line  \ninserted\nsecond line  \n\tcode\t\nlast \n"
        );
    }

    #[test]
    fn an_indentation_match_keeps_unchanged_lines_byte_for_byte() {
        let file = "fn f() {\n        let a = 1;   \n        let b = 2;\n}\n";
        let out = apply_search_replace(
            "f.rs",
            file,
            "    let a = 1;\n    let b = 2;\n",
            "    let a = 1;\n    let b = 3;\n",
            1,
        )
        .unwrap();
        assert_eq!(
            out.text,
            "fn f() {\n        let a = 1;   \n        let b = 3;\n}\n"
        );
    }
}

#[cfg(test)]
mod fence_tests {
    use super::Fence;

    #[test]
    fn fences_of_every_kind_open_and_close() {
        for (open, close) in [
            ("```", "```"),
            ("```python", "```"),
            ("````rust", "````"),
            ("<source>", "</source>"),
            ("<source python>", "</source>"),
            ("<code>", "</code>"),
            ("<pre>", "</pre>"),
            ("<codeblock c++>", "</codeblock>"),
            ("<sourcecode>", "</sourcecode>"),
            // Aider writes the language right after the tag.
            ("<source>python", "</source>"),
            ("<code>js", "</code>"),
            ("<pre>rust", "</pre>"),
            ("<codeblock>c++", "</codeblock>"),
            ("<sourcecode>ts", "</sourcecode>"),
        ] {
            let f = Fence::open(open).unwrap_or_else(|| panic!("{open}"));
            assert!(f.closed_by(close), "{open} / {close}");
            assert!(Fence::is_fence_line(open) && Fence::is_fence_line(close));
        }
        assert!(!Fence::open("````rust").unwrap().closed_by("```"));
        for not in [
            "<div>",
            "<source a b>",
            "<source py>python",
            "<source>python script",
            "<source>a/b.py",
            "src/main.rs",
            "<<< path=a >>>",
            "``x`",
        ] {
            assert_eq!(Fence::open(not), None, "{not}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str, s: &str, r: &str) -> Applied {
        apply_search_replace("f.rs", text, s, r, 1).unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn exact_match_and_tier() {
        let a = ok("fn a() {}\nfn b() {}\n", "fn b() {}", "fn b() { 1 }");
        assert_eq!(a.text, "fn a() {}\nfn b() { 1 }\n");
        assert_eq!(a.tier, Some(Tier::Exact));
    }

    #[test]
    fn crlf_file_lf_search_keeps_crlf() {
        let a = ok("\u{feff}a\r\nb\r\nc\r\n", "b\nc\n", "B\nC\n");
        assert_eq!(a.text, "\u{feff}a\r\nB\r\nC\r\n");
        assert_eq!(a.tier, Some(Tier::LineEndings));
    }

    #[test]
    fn trailing_whitespace_tier() {
        let a = ok("x = 1   \ny = 2\n", "x = 1\ny = 2", "x = 3\ny = 2");
        assert_eq!(a.text, "x = 3\ny = 2\n");
        assert_eq!(a.tier, Some(Tier::TrailingWhitespace));
    }

    #[test]
    fn indentation_offset_reindents_replacement() {
        let file = "def f():\n    if x:\n        return 1\n    return 2\n";
        let a = ok(
            file,
            "if x:\n    return 1",
            "if x:\n    return 10\nelse:\n    pass",
        );
        assert_eq!(
            a.text,
            "def f():\n    if x:\n        return 10\n    else:\n        pass\n    return 2\n"
        );
        assert_eq!(a.tier, Some(Tier::Indentation));
        // SEARCH more indented than the file.
        let a = ok("a\nb\n", "    a\n    b", "    a\n    c");
        assert_eq!(a.text, "a\nc\n");
    }

    #[test]
    fn unicode_lookalikes_and_line_numbers() {
        let a = ok(
            "say(\"hi\") - ok\n",
            "say(\u{201C}hi\u{201D}) \u{2013} ok",
            "say(\"bye\")",
        );
        assert_eq!(a.text, "say(\"bye\")\n");
        assert_eq!(a.tier, Some(Tier::Unicode));
        let a = ok(
            "one\ntwo\nthree\n",
            "2 | two\n3 | three",
            "2 | TWO\n3 | three",
        );
        assert_eq!(a.text, "one\nTWO\nthree\n");
        assert_eq!(a.tier, Some(Tier::LineNumbers));
    }

    #[test]
    fn ambiguous_is_refused_with_line_numbers() {
        let e = apply_search_replace("f.rs", "x();\ny();\nx();\n", "x();", "z();", 2).unwrap_err();
        let Failure::Ambiguous(m) = e else { panic!() };
        assert!(
            m.starts_with("block 2: SEARCH matches 2 places in f.rs (lines 1, 3)"),
            "{m}"
        );
        assert!(m.contains("    3 | x();"), "{m}");
    }

    #[test]
    fn no_match_shows_closest_window_and_first_difference() {
        let e = apply_search_replace(
            "f.rs",
            "fn a() {\n    let x = 1;\n    x\n}\n",
            "fn a() {\n    let x = 2;\n    x\n}",
            "",
            1,
        )
        .unwrap_err();
        let Failure::NoMatch(m) = e else { panic!() };
        assert!(m.contains("The closest lines are 1-4:"), "{m}");
        assert!(m.contains("First difference at line 2: the file has `    let x = 1;` but SEARCH has `    let x = 2;`."), "{m}");
    }

    #[test]
    fn already_applied_both_ways() {
        let a = ok("new line\n", "old line", "new line");
        assert!(a.already_applied);
        // Insertion anchored on an unchanged line: SEARCH lies inside the applied REPLACE.
        let a = ok(
            "fn main() {\n    setup();\n    run();\n}\n",
            "fn main() {",
            "fn main() {\n    setup();",
        );
        assert!(a.already_applied);
        assert_eq!(a.text, "fn main() {\n    setup();\n    run();\n}\n");
    }

    #[test]
    fn empty_replace_deletes_and_final_newline_is_kept() {
        let a = ok("a\nb\nc", "b\n", "");
        assert_eq!(a.text, "a\nc");
        let a = ok("keep\ndrop me\n", "drop me\n", "");
        assert_eq!(a.text, "keep\n");
    }

    #[test]
    fn empty_search_creates_only_empty_files() {
        let a = ok("", "", "hello\n");
        assert_eq!(a.text, "hello\n");
        assert!(matches!(
            apply_search_replace("f", "x\n", "", "y\n", 1),
            Err(Failure::Invalid(_))
        ));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Lines without leading or trailing whitespace; small pool so repeats (and thus ambiguity
    /// that must be resolved with context) are common.
    fn line() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("}".to_string()),
            Just("x += 1;".to_string()),
            Just("return x;".to_string()),
            Just(String::new()),
            "[a-z]{1,6}( [a-z0-9();=]{1,8}){0,2}",
        ]
    }

    /// An edit from `old` to `new` as an LLM would write it: the changed lines plus the least
    /// context that makes SEARCH unique.
    fn make_edit(
        old: &[String],
        a: usize,
        b: usize,
        mid: &[String],
    ) -> Option<(String, String, String, String)> {
        let join = |ls: &[String]| ls.iter().map(|l| format!("{l}\n")).collect::<String>();
        let old_text = join(old);
        let mut new_lines = old[..a].to_vec();
        new_lines.extend_from_slice(mid);
        new_lines.extend_from_slice(&old[b..]);
        let new_text = join(&new_lines);
        for c in 0..=old.len() {
            let (s0, s1) = (a.saturating_sub(c), (b + c).min(old.len()));
            let search = join(&old[s0..s1]);
            if search.trim().is_empty() {
                continue;
            }
            if find_all(&old_text, &search).len() == 1 {
                let mut replace_lines = old[s0..a].to_vec();
                replace_lines.extend_from_slice(mid);
                replace_lines.extend_from_slice(&old[b..s1]);
                return Some((old_text, new_text, search, join(&replace_lines)));
            }
        }
        None
    }

    fn case() -> impl Strategy<Value = (Vec<String>, usize, usize, Vec<String>)> {
        prop::collection::vec(line(), 1..25).prop_flat_map(|old| {
            let n = old.len();
            (Just(old), 0..=n, 0..=n, prop::collection::vec(line(), 0..5))
                .prop_map(|(old, x, y, mid)| (old, x.min(y), x.max(y), mid))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn an_edit_made_from_old_and_new_turns_old_into_new((old, a, b, mid) in case()) {
            let Some((old_text, new_text, search, replace)) = make_edit(&old, a, b, &mid) else { return Ok(()) };
            // An edit whose REPLACE is already in the file is (correctly) `already_applied`.
            if !(find_all(&old_text, &replace).is_empty() || replace.trim().is_empty()) || old_text == new_text {
                return Ok(());
            }
            let got = apply_search_replace("f", &old_text, &search, &replace, 1);
            prop_assert_eq!(got.map(|a| a.text), Ok(new_text));
        }

        #[test]
        fn it_still_applies_after_llm_style_perturbations(
            (old, a, b, mid) in case(),
            crlf in any::<bool>(),
            trailing in any::<bool>(),
            indent in any::<bool>(),
        ) {
            let Some((old_text, new_text, search, replace)) = make_edit(&old, a, b, &mid) else { return Ok(()) };
            // An edit whose REPLACE is already in the file is (correctly) `already_applied`.
            if !(find_all(&old_text, &replace).is_empty() || replace.trim().is_empty()) || old_text == new_text {
                return Ok(());
            }
            let file = if crlf { old_text.replace('\n', "\r\n") } else { old_text.clone() };
            let perturb = |s: &str, trailing: bool| -> String {
                s.lines()
                    .map(|l| {
                        let l = if indent && !l.is_empty() { format!("    {l}") } else { l.to_string() };
                        if trailing { format!("{l}  \n") } else { format!("{l}\n") }
                    })
                    .collect()
            };
            let search_p = perturb(&search, trailing);
            let replace_p = perturb(&replace, false);
            let expected = if crlf { new_text.replace('\n', "\r\n") } else { new_text };
            let got = apply_search_replace("f", &file, &search_p, &replace_p, 1);
            prop_assert_eq!(got.map(|a| a.text), Ok(expected));
        }
    }
}
