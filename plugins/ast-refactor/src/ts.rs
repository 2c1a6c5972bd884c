//! TypeScript and JavaScript with oxc: the parser gives the AST, the semantic builder the
//! scopes, symbols and resolved references a rename follows.

use crate::Changes;
use crate::text::{Edit, JS_KEYWORDS, Lines, apply, is_identifier};
use oxc_allocator::Allocator;
use oxc_ast::AstKind;
use oxc_ast::ast::{
    Class, ClassElement, Declaration, ExportDefaultDeclarationKind, Expression, ImportDeclaration,
    ImportDeclarationSpecifier, ImportOrExportKind, MethodDefinitionKind, Program, Statement,
    TSTypeName,
};
use oxc_ast_visit::Visit;
use oxc_parser::{Parser, ParserReturn};
use oxc_semantic::{ReferenceId, Scoping, SemanticBuilder, SymbolId};
use oxc_span::{GetSpan, SourceType, Span};
use serde_json::{Value, json};
use std::collections::HashSet;

const SCRIPT_EXTS: &[&str] = &["ts", "tsx", "mts", "cts", "js", "jsx", "mjs", "cjs"];

/// Is `path` a TypeScript or JavaScript file?
pub fn is_script(path: &str) -> bool {
    path.rsplit_once('.')
        .is_some_and(|(_, e)| SCRIPT_EXTS.contains(&e))
}

/// Refuse a new name that is not a JS identifier or is a reserved word.
pub fn check_name(name: &str) -> Result<(), String> {
    if !is_identifier(name, true) {
        return Err(format!(
            "rename: `{name}` is not a valid JavaScript/TypeScript identifier"
        ));
    }
    if JS_KEYWORDS.contains(&name) {
        return Err(format!(
            "rename: `{name}` is a reserved word and cannot name a binding"
        ));
    }
    Ok(())
}

fn parse<'a>(alloc: &'a Allocator, path: &str, text: &'a str) -> Result<ParserReturn<'a>, String> {
    let st = SourceType::from_path(path).unwrap_or_default();
    let ret = Parser::new(alloc, text, st).parse();
    if ret.panicked || !ret.diagnostics.is_empty() {
        let lines = Lines::new(text);
        let first = ret
            .diagnostics
            .first()
            .map(|d| {
                let at = d
                    .labels
                    .as_ref()
                    .first()
                    .map(|l| format!(" (line {})", lines.line(l.offset() as usize)))
                    .unwrap_or_default();
                format!("{}{at}", d.message)
            })
            .unwrap_or_else(|| "the parser gave up".into());
        return Err(format!(
            "{path} does not parse: {first}; fix the syntax first"
        ));
    }
    Ok(ret)
}

fn scoping_of(program: &Program<'_>) -> Scoping {
    SemanticBuilder::new()
        .build(program)
        .semantic
        .into_scoping()
}

/// What a rename needs from one file, collected in one walk.
#[derive(Default)]
struct Collect {
    /// Names of interest (old, new).
    names: [String; 2],
    /// Binding identifiers named old: (symbol, span).
    bindings: Vec<(Option<SymbolId>, Span)>,
    /// Identifier references named old or new: (reference, span, is_old).
    refs: Vec<(Option<ReferenceId>, Span, bool)>,
    /// Starts of shorthand property keys (`{ x }` in literals, patterns, assignments).
    shorthand: HashSet<u32>,
    /// Starts of `import { x }` specifiers (imported and local share the span).
    import_short: HashSet<u32>,
    /// Starts of `export { x }` specifiers (local and exported share the span).
    export_short: HashSet<u32>,
    /// `NS.old` member accesses and qualified names: (object reference, property span).
    members: Vec<(Option<ReferenceId>, Span)>,
}

impl<'a> Visit<'a> for Collect {
    fn enter_node(&mut self, kind: AstKind<'a>) {
        let [old, new] = &self.names;
        match kind {
            AstKind::IdentifierReference(it)
                if it.name.as_str() == old || it.name.as_str() == new =>
            {
                self.refs
                    .push((it.reference_id.get(), it.span, it.name.as_str() == old));
            }
            AstKind::BindingIdentifier(it) if it.name.as_str() == old => {
                self.bindings.push((it.symbol_id.get(), it.span));
            }
            AstKind::ObjectProperty(p) if p.shorthand => {
                self.shorthand.insert(p.key.span().start);
            }
            AstKind::BindingProperty(p) if p.shorthand => {
                self.shorthand.insert(p.key.span().start);
            }
            AstKind::AssignmentTargetPropertyIdentifier(p) => {
                self.shorthand.insert(p.binding.span.start);
            }
            AstKind::ImportSpecifier(s) if s.imported.span() == s.local.span => {
                self.import_short.insert(s.local.span.start);
            }
            AstKind::ExportSpecifier(s) if s.local.span() == s.exported.span() => {
                self.export_short.insert(s.local.span().start);
            }
            AstKind::StaticMemberExpression(m) => {
                if let Expression::Identifier(obj) = &m.object
                    && m.property.name.as_str() == old
                {
                    self.members.push((obj.reference_id.get(), m.property.span));
                }
            }
            AstKind::TSQualifiedName(q) => {
                if let TSTypeName::IdentifierReference(obj) = &q.left
                    && q.right.name.as_str() == old
                {
                    self.members.push((obj.reference_id.get(), q.right.span));
                }
            }
            _ => {}
        }
    }
}

fn collect(program: &Program<'_>, old: &str, new: &str) -> Collect {
    let mut c = Collect {
        names: [old.to_string(), new.to_string()],
        ..Default::default()
    };
    c.visit_program(program);
    c
}

fn within(scoping: &Scoping, scope: oxc_semantic::ScopeId, outer: oxc_semantic::ScopeId) -> bool {
    scope == outer || scoping.scope_is_descendant_of(scope, outer)
}

/// The edits renaming `sym` (named `old`) to `new` in one file, after checking that no
/// reference would be captured by another binding. `importer`: the file imports the renamed
/// export, so `import { old }` becomes `import { new }` and an `export { old }` keeps its
/// public name (`export { new as old }`); otherwise `import { old }` keeps the imported name
/// (`import { old as new }`) and `export { old }` renames the export.
fn rename_symbol(
    c: &Collect,
    scoping: &Scoping,
    text: &str,
    sym: SymbolId,
    old: &str,
    new: &str,
    importer: bool,
) -> Result<Vec<Edit>, String> {
    let lines = Lines::new(text);
    let decl_scope = scoping.symbol_scope_id(sym);
    if let Some(other) = scoping.get_binding(decl_scope, new.into()) {
        return Err(format!(
            "`{new}` is already declared in the same scope (line {}); pick another name",
            lines.line(scoping.symbol_span(other).start as usize)
        ));
    }
    let mut edits = Vec::new();
    for (s, span) in &c.bindings {
        if *s != Some(sym) {
            continue;
        }
        let (a, b) = (span.start as usize, span.end as usize);
        edits.push(if c.import_short.contains(&span.start) && !importer {
            Edit::new(a, b, format!("{old} as {new}"))
        } else if c.shorthand.contains(&span.start) {
            Edit::new(a, b, format!("{old}: {new}"))
        } else {
            Edit::new(a, b, new)
        });
    }
    for (rid, span, is_old) in &c.refs {
        let Some(rid) = rid else { continue };
        let r = scoping.get_reference(*rid);
        let line = lines.line(span.start as usize);
        if *is_old {
            if r.symbol_id() != Some(sym) {
                continue;
            }
            if let Some(b) = scoping.find_binding(r.scope_id(), new.into())
                && within(scoping, scoping.symbol_scope_id(b), decl_scope)
            {
                return Err(format!(
                    "renaming would change what `{old}` means on line {line}: a `{new}` declared on line {} would capture it; pick another name",
                    lines.line(scoping.symbol_span(b).start as usize)
                ));
            }
            let (a, b) = (span.start as usize, span.end as usize);
            edits.push(if c.export_short.contains(&span.start) {
                if importer {
                    Edit::new(a, b, format!("{new} as {old}"))
                } else {
                    Edit::new(a, b, new)
                }
            } else if c.shorthand.contains(&span.start) {
                Edit::new(a, b, format!("{old}: {new}"))
            } else {
                Edit::new(a, b, new)
            });
        } else {
            // A use of `new` that the renamed declaration would capture.
            let visible = scoping.find_binding(r.scope_id(), old.into()) == Some(sym);
            let inner = r.symbol_id().is_some_and(|s| {
                let ss = scoping.symbol_scope_id(s);
                ss != decl_scope && within(scoping, ss, decl_scope)
            });
            if visible && !inner {
                return Err(format!(
                    "renaming would capture the use of `{new}` on line {line} (it would then mean the renamed `{old}`); pick another name"
                ));
            }
        }
    }
    Ok(edits)
}

/// Normalised workspace path of an import specifier seen from `importer`, if relative.
fn join_specifier(importer: &str, spec: &str) -> Option<String> {
    if !(spec.starts_with("./") || spec.starts_with("../") || spec == "." || spec == "..") {
        return None;
    }
    let mut parts: Vec<&str> = importer.split('/').collect();
    parts.pop();
    for seg in spec.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

/// Does `spec`, imported by `importer`, name the file `target`?
fn resolves_to(importer: &str, spec: &str, target: &str) -> bool {
    let Some(base) = join_specifier(importer, spec) else {
        return false;
    };
    if base == target {
        return true;
    }
    let ext_match = |stem: &str| {
        SCRIPT_EXTS.iter().any(|e| {
            target == format!("{stem}.{e}")
                || target == format!("{stem}.d.{e}")
                || target == format!("{stem}/index.{e}")
        })
    };
    if ext_match(&base) {
        return true;
    }
    // TypeScript's ESM convention: `./a.js` names `a.ts`.
    for js in [".js", ".jsx", ".mjs", ".cjs"] {
        if let Some(stem) = base.strip_suffix(js)
            && ext_match(stem)
        {
            return true;
        }
    }
    false
}

/// Pick the declaration to rename.
fn pick_symbol(
    scoping: &Scoping,
    lines: &Lines,
    path: &str,
    symbol: &str,
    line: Option<usize>,
) -> Result<SymbolId, String> {
    let all: Vec<SymbolId> = scoping
        .symbol_ids()
        .filter(|s| scoping.symbol_name(*s) == symbol)
        .collect();
    let line_of = |s: SymbolId| lines.line(scoping.symbol_span(s).start as usize);
    let list = |v: &[SymbolId]| {
        v.iter()
            .map(|s| line_of(*s).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if all.is_empty() {
        return Err(format!(
            "`{symbol}` is not declared in {path}; rename it in the file that declares it"
        ));
    }
    if let Some(l) = line {
        let on: Vec<SymbolId> = all.iter().copied().filter(|s| line_of(*s) == l).collect();
        return match on.as_slice() {
            [s] => Ok(*s),
            [] => Err(format!(
                "no declaration of `{symbol}` on line {l} of {path}; it is declared on line(s) {}",
                list(&all)
            )),
            _ => Err(format!(
                "several declarations of `{symbol}` on line {l} of {path}"
            )),
        };
    }
    if let [s] = all.as_slice() {
        return Ok(*s);
    }
    let root = scoping.root_scope_id();
    let top: Vec<SymbolId> = all
        .iter()
        .copied()
        .filter(|s| scoping.symbol_scope_id(*s) == root)
        .collect();
    match top.as_slice() {
        [s] => Ok(*s),
        _ => Err(format!(
            "`{symbol}` is declared several times in {path} (lines {}); pass `line` to choose one",
            list(&all)
        )),
    }
}

/// Rename `symbol` declared in `path`, following imports into `others` (the workspace's other
/// script files whose text contains the name).
pub fn rename(
    path: &str,
    text: &str,
    others: &[(String, String)],
    symbol: &str,
    new: &str,
    line: Option<usize>,
) -> Result<Changes, String> {
    let alloc = Allocator::default();
    let ret = parse(&alloc, path, text)?;
    let scoping = scoping_of(&ret.program);
    let lines = Lines::new(text);
    let sym = pick_symbol(&scoping, &lines, path, symbol, line)?;
    let c = collect(&ret.program, symbol, new);
    let edits = rename_symbol(&c, &scoping, text, sym, symbol, new, false)?;
    let decl_line = lines.line(scoping.symbol_span(sym).start as usize);
    let mut out = Changes::default();
    let mut count = edits.len();
    out.files
        .push((path.to_string(), text.to_string(), apply(text, &edits)?));
    // Exported under its own name: the importers follow.
    let exported = scoping.symbol_scope_id(sym) == scoping.root_scope_id()
        && ret.module_record.local_export_entries.iter().any(|e| {
            e.local_name.name().is_some_and(|n| n.as_str() == symbol)
                && matches!(&e.export_name, oxc_syntax::module_record::ExportExportName::Name(n) if n.name.as_str() == symbol)
        });
    let mut touched = Vec::new();
    if exported {
        for (other, other_text) in others {
            match rename_importer(other, other_text, path, symbol, new, &mut out.warnings) {
                Ok(e) if !e.is_empty() => {
                    count += e.len();
                    touched.push(other.clone());
                    out.files
                        .push((other.clone(), other_text.clone(), apply(other_text, &e)?));
                }
                Ok(_) => {}
                Err(w) => out.warnings.push(w),
            }
        }
    }
    out.summary = format!(
        "renamed `{symbol}` (declared on line {decl_line} of {path}) to `{new}`: {count} occurrence(s) in {} file(s){}",
        1 + touched.len(),
        if touched.is_empty() {
            String::new()
        } else {
            format!(" ({path}, {})", touched.join(", "))
        }
    );
    Ok(out)
}

/// The edits in a file that may import `symbol` from `target`.
fn rename_importer(
    path: &str,
    text: &str,
    target: &str,
    old: &str,
    new: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<Edit>, String> {
    let alloc = Allocator::default();
    let ret = match parse(&alloc, path, text) {
        Ok(r) => r,
        Err(e) => {
            // Only a problem when it imports the target; a cheap look at the text says
            // whether it might.
            let stem = target.rsplit('/').next().unwrap_or(target);
            let stem = stem.split('.').next().unwrap_or(stem);
            return if text.contains(stem) {
                Err(format!(
                    "{e}; its imports of {target} (if any) were not updated"
                ))
            } else {
                Ok(Vec::new())
            };
        }
    };
    let program = &ret.program;
    // Semantic analysis first: it fills in the symbol ids of the bindings below.
    let scoping = scoping_of(program);
    let mut pending_locals: Vec<(SymbolId, Span)> = Vec::new();
    let mut namespaces: Vec<SymbolId> = Vec::new();
    let mut edits = Vec::new();
    for stmt in &program.body {
        match stmt {
            Statement::ImportDeclaration(d) if resolves_to(path, &d.source.value, target) => {
                for s in d.specifiers.iter().flatten() {
                    match s {
                        ImportDeclarationSpecifier::ImportSpecifier(s)
                            if s.imported.name().as_str() == old =>
                        {
                            if s.imported.span() == s.local.span {
                                match s.local.symbol_id.get() {
                                    Some(id) => pending_locals.push((id, s.local.span)),
                                    None => edits
                                        .push(span_edit(s.local.span, format!("{new} as {old}"))),
                                }
                            } else {
                                edits.push(span_edit(s.imported.span(), new.to_string()));
                            }
                        }
                        ImportDeclarationSpecifier::ImportNamespaceSpecifier(s) => {
                            if let Some(id) = s.local.symbol_id.get() {
                                namespaces.push(id);
                            }
                        }
                        _ => {}
                    }
                }
            }
            Statement::ExportFromDeclaration(d) if resolves_to(path, &d.source.value, target) => {
                for s in &d.specifiers {
                    if s.local.name().as_str() == old {
                        if s.local.span() == s.exported.span() {
                            edits.push(span_edit(s.local.span(), format!("{new} as {old}")));
                        } else {
                            edits.push(span_edit(s.local.span(), new.to_string()));
                        }
                    }
                }
            }
            Statement::ExportAllDeclaration(d)
                if d.exported.is_none() && resolves_to(path, &d.source.value, target) =>
            {
                warnings.push(format!(
                    "{path} re-exports everything of {target} (`export *`): modules importing `{old}` through {path} were not updated"
                ));
            }
            _ => {}
        }
    }
    if pending_locals.is_empty() && namespaces.is_empty() {
        return Ok(edits);
    }
    let c = collect(program, old, new);
    for (id, span) in pending_locals {
        match rename_symbol(&c, &scoping, text, id, old, new, true) {
            Ok(e) => edits.extend(e),
            Err(why) => {
                // Keep the local name: `import { new as old }`.
                warnings.push(format!(
                    "{path}: kept the local name `{old}` (`import {{ {new} as {old} }}`): {why}"
                ));
                edits.push(span_edit(span, format!("{new} as {old}")));
            }
        }
    }
    for (rid, span) in &c.members {
        if let Some(rid) = rid
            && scoping
                .get_reference(*rid)
                .symbol_id()
                .is_some_and(|s| namespaces.contains(&s))
        {
            edits.push(span_edit(*span, new.to_string()));
        }
    }
    Ok(edits)
}

fn span_edit(span: Span, text: String) -> Edit {
    Edit::new(span.start as usize, span.end as usize, text)
}

// ---------------------------------------------------------------------------------------------
// Outline

fn entry(text: &str, lines: &Lines, name: &str, kind: &str, span: Span, exported: bool) -> Value {
    let _ = text;
    json!({
        "name": name,
        "kind": kind,
        "line": lines.line(span.start as usize),
        "end_line": lines.line((span.end as usize).saturating_sub(1).max(span.start as usize)),
        "exported": exported,
    })
}

fn slice(text: &str, span: Span) -> &str {
    &text[span.start as usize..span.end as usize]
}

fn class_entry(text: &str, lines: &Lines, c: &Class<'_>, span: Span, exported: bool) -> Value {
    let name = c.id.as_ref().map(|i| i.name.as_str()).unwrap_or("default");
    let mut v = entry(text, lines, name, "class", span, exported);
    let members: Vec<Value> = c
        .body
        .body
        .iter()
        .filter_map(|m| match m {
            ClassElement::MethodDefinition(m) => {
                let kind = match m.kind {
                    MethodDefinitionKind::Constructor => "constructor",
                    MethodDefinitionKind::Get => "getter",
                    MethodDefinitionKind::Set => "setter",
                    MethodDefinitionKind::Method => "method",
                };
                Some(entry(
                    text,
                    lines,
                    slice(text, m.key.span()),
                    kind,
                    m.span,
                    false,
                ))
            }
            ClassElement::PropertyDefinition(p) => Some(entry(
                text,
                lines,
                slice(text, p.key.span()),
                "property",
                p.span,
                false,
            )),
            _ => None,
        })
        .collect();
    v["members"] = Value::Array(members);
    v
}

#[derive(Default)]
struct Names(Vec<(String, Span)>);

impl<'a> Visit<'a> for Names {
    fn enter_node(&mut self, kind: AstKind<'a>) {
        if let AstKind::BindingIdentifier(b) = kind {
            self.0.push((b.name.to_string(), b.span));
        }
    }
}

fn declaration(
    text: &str,
    lines: &Lines,
    d: &Declaration<'_>,
    exported: bool,
    out: &mut Vec<Value>,
) {
    match d {
        Declaration::VariableDeclaration(v) => {
            let kind = v.kind.as_str();
            for decl in &v.declarations {
                let mut names = Names::default();
                names.visit_binding_pattern(&decl.id);
                let is_fn = matches!(
                    decl.init,
                    Some(
                        Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_)
                    )
                );
                for (n, _) in names.0 {
                    out.push(entry(
                        text,
                        lines,
                        &n,
                        if is_fn { "function" } else { kind },
                        decl.span,
                        exported,
                    ));
                }
            }
        }
        Declaration::FunctionDeclaration(f) => {
            let name = f.id.as_ref().map(|i| i.name.as_str()).unwrap_or("default");
            out.push(entry(text, lines, name, "function", f.span, exported));
        }
        Declaration::ClassDeclaration(c) => out.push(class_entry(text, lines, c, c.span, exported)),
        Declaration::TSTypeAliasDeclaration(t) => {
            out.push(entry(text, lines, &t.id.name, "type", t.span, exported))
        }
        Declaration::TSInterfaceDeclaration(t) => out.push(entry(
            text,
            lines,
            &t.id.name,
            "interface",
            t.span,
            exported,
        )),
        Declaration::TSEnumDeclaration(t) => {
            out.push(entry(text, lines, &t.id.name, "enum", t.span, exported))
        }
        other => {
            let span = other.span();
            let head = slice(text, span)
                .lines()
                .next()
                .unwrap_or("")
                .trim_end_matches('{');
            out.push(entry(text, lines, head.trim(), "namespace", span, exported));
        }
    }
}

/// Top-level symbols with kinds and lines (classes with their members).
pub fn outline(path: &str, text: &str) -> Result<Vec<Value>, String> {
    let alloc = Allocator::default();
    let ret = parse(&alloc, path, text)?;
    let lines = Lines::new(text);
    let mut out = Vec::new();
    for stmt in &ret.program.body {
        match stmt {
            Statement::ImportDeclaration(d) => out.push(entry(
                text,
                &lines,
                &d.source.value,
                "import",
                d.span,
                false,
            )),
            Statement::ExportDeclaration(e) => {
                declaration(text, &lines, &e.declaration, true, &mut out)
            }
            Statement::ExportDefaultDeclaration(e) => match &e.declaration {
                ExportDefaultDeclarationKind::FunctionDeclaration(f) => {
                    let name = f.id.as_ref().map(|i| i.name.as_str()).unwrap_or("default");
                    out.push(entry(text, &lines, name, "function", e.span, true));
                }
                ExportDefaultDeclarationKind::ClassDeclaration(c) => {
                    out.push(class_entry(text, &lines, c, e.span, true))
                }
                _ => out.push(entry(text, &lines, "default", "export", e.span, true)),
            },
            Statement::ExportNamedDeclaration(e) => {
                for s in &e.specifiers {
                    out.push(entry(
                        text,
                        &lines,
                        &s.exported.name(),
                        "export",
                        s.span,
                        true,
                    ));
                }
            }
            Statement::ExportFromDeclaration(e) => {
                for s in &e.specifiers {
                    out.push(entry(
                        text,
                        &lines,
                        &s.exported.name(),
                        "re-export",
                        s.span,
                        true,
                    ));
                }
            }
            other => {
                if let Some(d) = other.as_declaration() {
                    declaration(text, &lines, d, false, &mut out);
                }
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Imports

/// One requested named import: `a` or `a as b`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Named {
    imported: String,
    local: String,
}

impl Named {
    fn parse(s: &str) -> Result<Named, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let (imported, local) = match words.as_slice() {
            [a] => (*a, *a),
            [a, "as", b] => (*a, *b),
            _ => return Err(format!("`{s}` is not a name to import (`a` or `a as b`)")),
        };
        for n in [imported, local] {
            if !is_identifier(n, true) {
                return Err(format!("`{n}` is not an identifier"));
            }
        }
        Ok(Named {
            imported: imported.into(),
            local: local.into(),
        })
    }

    fn render(&self) -> String {
        if self.imported == self.local {
            self.imported.clone()
        } else {
            format!("{} as {}", self.imported, self.local)
        }
    }
}

/// The parts of an import declaration, as text.
struct Clause {
    type_only: bool,
    default: Option<String>,
    namespace: Option<String>,
    /// (specifier text, imported name, local name).
    named: Vec<(String, String, String)>,
    multiline: bool,
}

impl Clause {
    fn of(text: &str, d: &ImportDeclaration<'_>) -> Clause {
        let mut c = Clause {
            type_only: d.import_kind == ImportOrExportKind::Type,
            default: None,
            namespace: None,
            named: Vec::new(),
            multiline: text[d.span.start as usize..d.source.span.start as usize].contains('\n'),
        };
        for s in d.specifiers.iter().flatten() {
            match s {
                ImportDeclarationSpecifier::ImportDefaultSpecifier(s) => {
                    c.default = Some(s.local.name.to_string())
                }
                ImportDeclarationSpecifier::ImportNamespaceSpecifier(s) => {
                    c.namespace = Some(s.local.name.to_string())
                }
                ImportDeclarationSpecifier::ImportSpecifier(s) => c.named.push((
                    slice(text, s.span).to_string(),
                    s.imported.name().to_string(),
                    s.local.name.to_string(),
                )),
            }
        }
        c
    }

    fn is_empty(&self) -> bool {
        self.default.is_none() && self.namespace.is_none() && self.named.is_empty()
    }

    /// `import ... from ` (up to the module specifier).
    fn render_head(&self) -> String {
        let mut parts = Vec::new();
        if let Some(d) = &self.default {
            parts.push(d.clone());
        }
        if let Some(n) = &self.namespace {
            parts.push(format!("* as {n}"));
        }
        if !self.named.is_empty() {
            let items: Vec<&str> = self.named.iter().map(|(t, _, _)| t.as_str()).collect();
            parts.push(if self.multiline {
                format!("{{\n  {},\n}}", items.join(",\n  "))
            } else {
                format!("{{ {} }}", items.join(", "))
            });
        }
        format!(
            "import {}{} from ",
            if self.type_only { "type " } else { "" },
            parts.join(", ")
        )
    }
}

/// Remove the whole lines of `start..end` when nothing else is on them, else just the span.
fn remove_statement(text: &str, start: usize, end: usize) -> Edit {
    let lines = Lines::new(text);
    let (a, b) = lines.full_lines(text, start, end);
    let only = text[a..start].trim().is_empty() && text[end..b].trim().is_empty();
    if only {
        Edit::new(a, b, "")
    } else {
        Edit::new(start, end, "")
    }
}

fn names_arg(args: &Value) -> Result<Option<Vec<Named>>, String> {
    match args.get("names") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| "`names` must contain strings".to_string())
                    .and_then(Named::parse)
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err("`names` must be an array of strings".into()),
    }
}

/// Add or remove an import; returns the new text and a summary.
pub fn imports(
    path: &str,
    text: &str,
    args: &Value,
    add: bool,
) -> Result<(String, String), String> {
    let op = if add { "add_import" } else { "remove_import" };
    let module = args
        .get("module")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{op}: `module` (the module specifier) is required"))?;
    let names = names_arg(args)?;
    let alloc = Allocator::default();
    let ret = parse(&alloc, path, text)?;
    let decls: Vec<&ImportDeclaration<'_>> = ret
        .program
        .body
        .iter()
        .filter_map(|s| match s {
            Statement::ImportDeclaration(d) => Some(&**d),
            _ => None,
        })
        .collect();
    let of_module: Vec<&ImportDeclaration<'_>> = decls
        .iter()
        .copied()
        .filter(|d| d.source.value.as_str() == module)
        .collect();
    if add {
        add_import(
            text,
            args,
            module,
            names.unwrap_or_default(),
            &decls,
            &of_module,
        )
    } else {
        remove_import(text, args, module, names, &of_module)
    }
}

fn add_import(
    text: &str,
    args: &Value,
    module: &str,
    names: Vec<Named>,
    decls: &[&ImportDeclaration<'_>],
    of_module: &[&ImportDeclaration<'_>],
) -> Result<(String, String), String> {
    let default = match args.get("default") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if is_identifier(s, true) => Some(s.clone()),
        Some(_) => {
            return Err("add_import: `default` must be an identifier (the local name)".into());
        }
    };
    let namespace = match args.get("namespace") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if is_identifier(s, true) => Some(s.clone()),
        Some(_) => return Err("add_import: `namespace` must be an identifier".into()),
    };
    let type_only = args
        .get("type_only")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if names.is_empty() && default.is_none() && namespace.is_none() {
        return Err("add_import: give `names`, `default` or `namespace`".into());
    }
    // Merge into an existing import of the module with the same kind (a namespace import
    // cannot share a declaration with named imports).
    let existing = of_module.iter().find(|d| {
        let c = Clause::of(text, d);
        c.type_only == type_only
            && (namespace.is_none() || c.namespace == namespace || c.is_empty())
            && (c.namespace.is_none() || (names.is_empty() && default.is_none()))
    });
    if let Some(d) = existing {
        let mut c = Clause::of(text, d);
        let mut added = Vec::new();
        if let Some(def) = &default {
            match &c.default {
                Some(have) if have == def => {}
                Some(have) => {
                    return Err(format!(
                        "add_import: {module}'s default export is already imported as `{have}`"
                    ));
                }
                None => {
                    c.default = Some(def.clone());
                    added.push(format!("default as {def}"));
                }
            }
        }
        if let Some(ns) = &namespace
            && c.namespace.is_none()
        {
            c.namespace = Some(ns.clone());
            added.push(format!("* as {ns}"));
        }
        for n in &names {
            if c.named
                .iter()
                .any(|(_, i, l)| *i == n.imported && *l == n.local)
            {
                continue;
            }
            c.named
                .push((n.render(), n.imported.clone(), n.local.clone()));
            added.push(n.render());
        }
        if added.is_empty() {
            return Ok((
                text.to_string(),
                format!("{module} is already imported as asked; nothing changed"),
            ));
        }
        let edit = Edit::new(
            d.span.start as usize,
            d.source.span.start as usize,
            c.render_head(),
        );
        return Ok((
            apply(text, &[edit])?,
            format!("added {} to the import of {module}", added.join(", ")),
        ));
    }
    // A new declaration after the last import, in the style of the others.
    let quote = decls
        .first()
        .and_then(|d| text[d.source.span.start as usize..].chars().next())
        .filter(|q| *q == '"' || *q == '\'')
        .unwrap_or('\'');
    let semi = decls
        .last()
        .map(|d| text[..d.span.end as usize].ends_with(';'))
        .unwrap_or(true);
    let mut c = Clause {
        type_only,
        default,
        namespace: None,
        named: names
            .iter()
            .map(|n| (n.render(), n.imported.clone(), n.local.clone()))
            .collect(),
        multiline: false,
    };
    let mut stmts = Vec::new();
    if let Some(ns) = namespace {
        // `import * as ns` goes alone or with the default only.
        let only_ns = Clause {
            type_only,
            default: None,
            namespace: Some(ns),
            named: Vec::new(),
            multiline: false,
        };
        stmts.push(only_ns.render_head());
    }
    if !c.is_empty() {
        stmts.push(c.render_head());
    }
    c.named.clear();
    let stmt: String = stmts
        .iter()
        .map(|h| format!("{h}{quote}{module}{quote}{}", if semi { ";" } else { "" }))
        .collect::<Vec<_>>()
        .join("\n");
    let (at, insert) = match decls.last() {
        Some(d) => (d.span.end as usize, format!("\n{stmt}")),
        None => {
            // After a hashbang line, else at the top.
            let at = if text.starts_with("#!") {
                text.find('\n').map(|i| i + 1).unwrap_or(text.len())
            } else {
                0
            };
            (at, format!("{stmt}\n"))
        }
    };
    Ok((
        apply(text, &[Edit::new(at, at, insert)])?,
        format!("added `{stmt}`"),
    ))
}

fn remove_import(
    text: &str,
    args: &Value,
    module: &str,
    names: Option<Vec<Named>>,
    of_module: &[&ImportDeclaration<'_>],
) -> Result<(String, String), String> {
    if of_module.is_empty() {
        return Err(format!(
            "remove_import: nothing is imported from `{module}`"
        ));
    }
    let default = match args.get("default") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(_) => return Err("remove_import: `default` must be true or false".into()),
    };
    let whole = names.is_none() && !default;
    let mut edits = Vec::new();
    let mut removed = Vec::new();
    for d in of_module {
        let (start, end) = (d.span.start as usize, d.span.end as usize);
        if whole {
            edits.push(remove_statement(text, start, end));
            removed.push(slice(text, d.span).to_string());
            continue;
        }
        let mut c = Clause::of(text, d);
        let before = c.named.len() + usize::from(c.default.is_some());
        if default && let Some(dft) = c.default.take() {
            removed.push(format!("default `{dft}`"));
        }
        if let Some(ns) = &names {
            c.named.retain(|(_, i, l)| {
                // `a` removes `a` and `x as a` and `a as y`.
                let hit = ns.iter().any(|n| n.local == *l || n.imported == *i);
                if hit {
                    removed.push(format!("`{l}`"));
                }
                !hit
            });
        }
        if c.named.len() + usize::from(c.default.is_some()) == before {
            continue;
        }
        if c.is_empty() {
            edits.push(remove_statement(text, start, end));
        } else {
            edits.push(Edit::new(
                start,
                d.source.span.start as usize,
                c.render_head(),
            ));
        }
    }
    if edits.is_empty() {
        return Err(format!(
            "remove_import: none of the given names is imported from `{module}`"
        ));
    }
    Ok((
        apply(text, &edits)?,
        format!(
            "removed {} from the imports of {module}",
            removed.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use crate::tests::{mem, run_err, run_ok};
    use serde_json::json;

    #[test]
    fn rename_across_files_leaves_strings_comments_and_shadows() {
        let a = "export function greet(name: string): string {\n  // greet the user\n  return `hi ${name}`;\n}\nexport const msg = \"greet\";\nfunction other() {\n  const greet = 1;\n  return greet + 1;\n}\nconst o = { greet };\n";
        let b = "import { greet } from './a';\nimport { greet as g } from \"./a.js\";\nconsole.log(greet('x'), g('y'), 'greet');\n";
        let c = "import * as A from '../src/a';\nA.greet('z');\n";
        let d = "import { greet } from './other';\ngreet();\n";
        let src = mem(&[
            ("src/a.ts", a),
            ("src/b.ts", b),
            ("lib/c.ts", c),
            ("src/d.ts", d),
        ]);
        let out = run_ok(
            &src,
            json!({"operation":"rename","path":"src/a.ts","symbol":"greet","new_name":"welcome"}),
        );
        assert_eq!(
            out["src/a.ts"],
            "export function welcome(name: string): string {\n  // greet the user\n  return `hi ${name}`;\n}\nexport const msg = \"greet\";\nfunction other() {\n  const greet = 1;\n  return greet + 1;\n}\nconst o = { greet: welcome };\n"
        );
        assert_eq!(
            out["src/b.ts"],
            "import { welcome } from './a';\nimport { welcome as g } from \"./a.js\";\nconsole.log(welcome('x'), g('y'), 'greet');\n"
        );
        assert_eq!(
            out["lib/c.ts"],
            "import * as A from '../src/a';\nA.welcome('z');\n"
        );
        assert!(!out.contains_key("src/d.ts"));
    }

    #[test]
    fn rename_picks_by_line_and_refuses_bad_names_and_captures() {
        let a = "let x = 1;\nfunction f() {\n  let x = 2;\n  return x;\n}\nfunction g() { let y = 0; return x + y; }\n";
        let src = mem(&[("a.js", a)]);
        let out = run_ok(
            &src,
            json!({"operation":"rename","path":"a.js","symbol":"x","new_name":"z","line":3}),
        );
        assert_eq!(
            out["a.js"],
            "let x = 1;\nfunction f() {\n  let z = 2;\n  return z;\n}\nfunction g() { let y = 0; return x + y; }\n"
        );
        let out = run_ok(
            &src,
            json!({"operation":"rename","path":"a.js","symbol":"x","new_name":"z"}),
        );
        assert_eq!(
            out["a.js"],
            "let z = 1;\nfunction f() {\n  let x = 2;\n  return x;\n}\nfunction g() { let y = 0; return z + y; }\n"
        );
        assert!(
            run_err(
                &src,
                json!({"operation":"rename","path":"a.js","symbol":"x","new_name":"y"})
            )
            .contains("capture")
        );
        assert!(
            run_err(
                &src,
                json!({"operation":"rename","path":"a.js","symbol":"x","new_name":"class"})
            )
            .contains("reserved")
        );
        assert!(
            run_err(
                &src,
                json!({"operation":"rename","path":"a.js","symbol":"x","new_name":"a-b"})
            )
            .contains("not a valid")
        );
        assert!(
            run_err(
                &src,
                json!({"operation":"rename","path":"a.js","symbol":"nope","new_name":"b"})
            )
            .contains("not declared")
        );
        assert!(
            run_err(
                &src,
                json!({"operation":"rename","path":"a.js","symbol":"x","new_name":"f"})
            )
            .contains("already declared")
        );
    }

    #[test]
    fn rename_types_and_jsx() {
        let a = "export interface Shape { w: number }\nexport function area(s: Shape): number { return s.w; }\n";
        let b = "import type { Shape } from './a';\nconst s: Shape = { w: 1 };\n";
        let c = "import { Button } from './btn';\nexport const App = () => <Button>hi</Button>;\n";
        let btn = "export function Button(p: any) { return null; }\n";
        let src = mem(&[("a.ts", a), ("b.ts", b), ("app.tsx", c), ("btn.tsx", btn)]);
        let out = run_ok(
            &src,
            json!({"operation":"rename","path":"a.ts","symbol":"Shape","new_name":"Form"}),
        );
        assert_eq!(
            out["b.ts"],
            "import type { Form } from './a';\nconst s: Form = { w: 1 };\n"
        );
        assert!(out["a.ts"].contains("interface Form") && out["a.ts"].contains("(s: Form)"));
        let out = run_ok(
            &src,
            json!({"operation":"rename","path":"btn.tsx","symbol":"Button","new_name":"Knob"}),
        );
        assert_eq!(
            out["app.tsx"],
            "import { Knob } from './btn';\nexport const App = () => <Knob>hi</Knob>;\n"
        );
    }

    #[test]
    fn importer_with_a_clash_keeps_its_local_name() {
        let a = "export const one = 1;\n";
        let b =
            "import { one } from './a';\nconst uno = 2;\nexport { one };\nconsole.log(one, uno);\n";
        let src = mem(&[("a.ts", a), ("b.ts", b)]);
        let out = run_ok(
            &src,
            json!({"operation":"rename","path":"a.ts","symbol":"one","new_name":"uno"}),
        );
        assert_eq!(
            out["b.ts"],
            "import { uno as one } from './a';\nconst uno = 2;\nexport { one };\nconsole.log(one, uno);\n"
        );
    }

    #[test]
    fn imports_merge_dedup_and_remove() {
        let t = "import { a } from './x';\nimport React from \"react\";\n\nconsole.log(a);\n";
        let src = mem(&[("m.ts", t)]);
        let out = run_ok(
            &src,
            json!({"operation":"add_import","path":"m.ts","module":"./x","names":["b","a","c as d"]}),
        );
        assert_eq!(
            out["m.ts"],
            "import { a, b, c as d } from './x';\nimport React from \"react\";\n\nconsole.log(a);\n"
        );
        let out = run_ok(
            &src,
            json!({"operation":"add_import","path":"m.ts","module":"./x","names":["a"]}),
        );
        assert!(out.is_empty());
        let out = run_ok(
            &src,
            json!({"operation":"add_import","path":"m.ts","module":"react","names":["useState"]}),
        );
        assert_eq!(
            out["m.ts"],
            "import { a } from './x';\nimport React, { useState } from \"react\";\n\nconsole.log(a);\n"
        );
        let out = run_ok(
            &src,
            json!({"operation":"add_import","path":"m.ts","module":"./y","default":"Y"}),
        );
        assert_eq!(
            out["m.ts"],
            "import { a } from './x';\nimport React from \"react\";\nimport Y from './y';\n\nconsole.log(a);\n"
        );
        let out = run_ok(
            &src,
            json!({"operation":"remove_import","path":"m.ts","module":"./x","names":["a"]}),
        );
        assert_eq!(
            out["m.ts"],
            "import React from \"react\";\n\nconsole.log(a);\n"
        );
        let out = run_ok(
            &src,
            json!({"operation":"remove_import","path":"m.ts","module":"react"}),
        );
        assert_eq!(out["m.ts"], "import { a } from './x';\n\nconsole.log(a);\n");
        assert!(
            run_err(
                &src,
                json!({"operation":"remove_import","path":"m.ts","module":"./z"})
            )
            .contains("nothing is imported")
        );
        let two = mem(&[("m.ts", "import { a, b, c } from './x';\n")]);
        let out = run_ok(
            &two,
            json!({"operation":"remove_import","path":"m.ts","module":"./x","names":["b"]}),
        );
        assert_eq!(out["m.ts"], "import { a, c } from './x';\n");
    }

    #[test]
    fn outline_lists_symbols() {
        let t = "import { a } from './x';\nexport interface I { x: number }\nexport class C {\n  constructor() {}\n  run(): void {}\n}\nconst f = () => 1;\nfunction g() {}\n";
        let src = mem(&[("o.ts", t)]);
        let out = crate::run(&json!({"operation":"outline","path":"o.ts"}), &src).unwrap();
        let s = &out["symbols"];
        let names: Vec<(&str, &str, u64)> = s
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().unwrap(),
                    v["kind"].as_str().unwrap(),
                    v["line"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            names,
            vec![
                ("./x", "import", 1),
                ("I", "interface", 2),
                ("C", "class", 3),
                ("f", "function", 7),
                ("g", "function", 8)
            ]
        );
        assert_eq!(s[2]["members"][1]["name"], "run");
        assert_eq!(s[2]["end_line"], 6);
    }
}
