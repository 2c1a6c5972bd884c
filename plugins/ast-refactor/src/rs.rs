//! Rust with syn: a small name resolver over the syntax tree (module items, blocks, function
//! parameters, closures, `let`, `match`, `for`, `if let`/`while let`, inline modules with
//! `use super::...`) drives renames; `use` items are edited as trees.

use crate::text::{Edit, Lines, RUST_KEYWORDS, apply, is_identifier};
use proc_macro2::{Span, TokenStream, TokenTree};
use serde_json::{Value, json};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::visit::{self, Visit};
use syn::{
    Block, Expr, FnArg, Ident, ImplItem, Item, ItemUse, Pat, Path, Signature, Stmt, TraitItem,
    UseTree,
};

/// Refuse a new name that is not a Rust identifier or is a keyword.
pub fn check_name(name: &str) -> Result<(), String> {
    if !is_identifier(name, false) {
        return Err(format!("rename: `{name}` is not a valid Rust identifier"));
    }
    if RUST_KEYWORDS.contains(&name) {
        return Err(format!("rename: `{name}` is a Rust keyword"));
    }
    Ok(())
}

fn parse(text: &str) -> Result<syn::File, String> {
    syn::parse_file(text).map_err(|e| {
        format!(
            "the file does not parse as Rust: {e} (line {}); fix the syntax first",
            e.span().start().line
        )
    })
}

/// Byte ranges of spans.
struct Pos<'t> {
    text: &'t str,
    lines: Lines,
}

impl<'t> Pos<'t> {
    fn new(text: &'t str) -> Pos<'t> {
        Pos {
            text,
            lines: Lines::new(text),
        }
    }
    fn range(&self, span: Span) -> (usize, usize) {
        let (s, e) = (span.start(), span.end());
        (
            self.lines.offset(self.text, s.line, s.column),
            self.lines.offset(self.text, e.line, e.column),
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ns {
    Value,
    Type,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ScopeKind {
    Module,
    /// The body of a function item: locals of enclosing blocks are not visible past it.
    Item,
    Local,
}

#[derive(Clone)]
struct Binding {
    name: String,
    ns: Ns,
    id: usize,
    item: bool,
    const_like: bool,
}

struct Scope {
    kind: ScopeKind,
    uid: usize,
    bindings: Vec<Binding>,
}

/// Where a name resolved: (scope depth, index in the scope, binding id).
type Hit = (usize, usize, usize);

struct Decl {
    id: usize,
    end: usize,
    ns: Ns,
    kind: &'static str,
    line: usize,
    item: bool,
    depth: usize,
    scope_uid: usize,
    is_old: bool,
    shorthand: bool,
}

struct Occ {
    start: usize,
    end: usize,
    is_old: bool,
    own: Option<Hit>,
    other: Option<Hit>,
    shorthand: bool,
    in_macro: bool,
}

struct Resolver<'t> {
    pos: Pos<'t>,
    old: String,
    new: String,
    scopes: Vec<Scope>,
    next_uid: usize,
    decls: Vec<Decl>,
    occs: Vec<Occ>,
    in_macro: bool,
    /// Locals bound by a parameter list rather than `let`.
    param: bool,
}

impl<'t> Resolver<'t> {
    fn interesting(&self, name: &str) -> bool {
        name == self.old || name == self.new
    }

    fn push(&mut self, kind: ScopeKind) {
        self.next_uid += 1;
        self.scopes.push(Scope {
            kind,
            uid: self.next_uid,
            bindings: Vec::new(),
        });
    }

    fn pop(&mut self) {
        self.scopes.pop();
    }

    fn lookup(&self, name: &str, ns: Ns) -> Option<Hit> {
        let mut past_item = false;
        for depth in (0..self.scopes.len()).rev() {
            let s = &self.scopes[depth];
            for (i, b) in s.bindings.iter().enumerate().rev() {
                if b.name == name && b.ns == ns && (!past_item || b.item) {
                    return Some((depth, i, b.id));
                }
            }
            match s.kind {
                ScopeKind::Module => return None,
                ScopeKind::Item => past_item = true,
                ScopeKind::Local => {}
            }
        }
        None
    }

    fn binding(&self, hit: Hit) -> &Binding {
        &self.scopes[hit.0].bindings[hit.1]
    }

    /// Index of the innermost module scope, and of its parent module.
    fn modules(&self) -> (usize, Option<usize>) {
        let mut mods = (0..self.scopes.len())
            .rev()
            .filter(|d| self.scopes[*d].kind == ScopeKind::Module);
        let cur = mods.next().unwrap_or(0);
        (cur, mods.next())
    }

    fn lookup_in(&self, depth: usize, name: &str, ns: Ns) -> Option<Hit> {
        self.scopes[depth]
            .bindings
            .iter()
            .enumerate()
            .rev()
            .find(|(_, b)| b.name == name && b.ns == ns)
            .map(|(i, b)| (depth, i, b.id))
    }

    #[allow(clippy::too_many_arguments)]
    fn declare(
        &mut self,
        ident: &Ident,
        nss: &[Ns],
        kind: &'static str,
        item: bool,
        const_like: bool,
        shorthand: bool,
    ) {
        let name = ident.to_string();
        if !self.interesting(&name) {
            return;
        }
        let (start, end) = self.pos.range(ident.span());
        let depth = self.scopes.len() - 1;
        let uid = self.scopes[depth].uid;
        for ns in nss {
            self.scopes[depth].bindings.push(Binding {
                name: name.clone(),
                ns: *ns,
                id: start,
                item,
                const_like,
            });
            self.decls.push(Decl {
                id: start,
                end,
                ns: *ns,
                kind,
                line: ident.span().start().line,
                item,
                depth,
                scope_uid: uid,
                is_old: name == self.old,
                shorthand,
            });
        }
    }

    fn occ_at(&mut self, ident: &Ident, own: Option<Hit>, other: Option<Hit>, shorthand: bool) {
        let (start, end) = self.pos.range(ident.span());
        self.occs.push(Occ {
            start,
            end,
            is_old: *ident == self.old,
            own,
            other,
            shorthand,
            in_macro: self.in_macro,
        });
    }

    /// A use of `ident` resolved in `ns` from here.
    fn occ(&mut self, ident: &Ident, ns: Ns, shorthand: bool) {
        let name = ident.to_string();
        if !self.interesting(&name) {
            return;
        }
        let other_name = if name == self.old {
            self.new.clone()
        } else {
            self.old.clone()
        };
        let own = self.lookup(&name, ns);
        let other = self.lookup(&other_name, ns);
        self.occ_at(ident, own, other, shorthand);
    }

    /// Declare a block's or module's items (they are visible throughout it), then its `use`s.
    fn preregister<'a>(&mut self, items: impl Iterator<Item = &'a Item> + Clone) {
        use Ns::{Type, Value};
        for item in items.clone() {
            match item {
                Item::Fn(f) => self.declare(&f.sig.ident, &[Value], "function", true, false, false),
                Item::Const(c) => self.declare(&c.ident, &[Value], "const", true, true, false),
                Item::Static(s) => self.declare(&s.ident, &[Value], "static", true, false, false),
                Item::Struct(s) => match s.fields {
                    syn::Fields::Named(_) => {
                        self.declare(&s.ident, &[Type], "struct", true, false, false)
                    }
                    syn::Fields::Unnamed(_) => {
                        self.declare(&s.ident, &[Type, Value], "struct", true, false, false)
                    }
                    syn::Fields::Unit => {
                        self.declare(&s.ident, &[Type, Value], "struct", true, true, false)
                    }
                },
                Item::Enum(e) => self.declare(&e.ident, &[Type], "enum", true, false, false),
                Item::Union(u) => self.declare(&u.ident, &[Type], "union", true, false, false),
                Item::Trait(t) => self.declare(&t.ident, &[Type], "trait", true, false, false),
                Item::Type(t) => self.declare(&t.ident, &[Type], "type", true, false, false),
                Item::Mod(m) => self.declare(&m.ident, &[Type], "module", true, false, false),
                _ => {}
            }
        }
        for item in items {
            if let Item::Use(u) = item {
                self.use_item(u);
            }
        }
    }

    fn use_item(&mut self, u: &ItemUse) {
        if u.leading_colon.is_some() {
            return;
        }
        let mut prefix = Vec::new();
        self.use_tree(&u.tree, &mut prefix);
    }

    fn use_tree(&mut self, tree: &UseTree, prefix: &mut Vec<String>) {
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix);
                }
            }
            UseTree::Name(n) => self.use_leaf(prefix, &n.ident, &n.ident),
            UseTree::Rename(r) => self.use_leaf(prefix, &r.ident, &r.rename),
            UseTree::Glob(_) => {
                // `use super::*;` brings the parent module's names in, below the module's own.
                if prefix.as_slice() == ["super"]
                    && let (cur, Some(parent)) = self.modules()
                {
                    let inherited: Vec<Binding> = self.scopes[parent]
                        .bindings
                        .iter()
                        .filter(|b| b.item)
                        .cloned()
                        .collect();
                    let scope = &mut self.scopes[cur].bindings;
                    for (i, b) in inherited.into_iter().enumerate() {
                        scope.insert(i, b);
                    }
                }
            }
        }
    }

    fn use_leaf(&mut self, prefix: &[String], leaf: &Ident, local: &Ident) {
        let (cur, parent) = self.modules();
        let module = match prefix {
            [s] if s == "self" => Some(cur),
            [s] if s == "super" => parent,
            _ => None,
        };
        let mut target: Vec<(Ns, usize, bool)> = Vec::new();
        if let Some(m) = module {
            let name = leaf.to_string();
            let mut first = true;
            for ns in [Ns::Value, Ns::Type] {
                if let Some(hit) = self.lookup_in(m, &name, ns) {
                    let b = self.binding(hit).clone();
                    target.push((ns, b.id, b.const_like));
                    if first && self.interesting(&name) {
                        let other = if name == self.old {
                            &self.new
                        } else {
                            &self.old
                        };
                        let other = self.lookup_in(m, other, ns);
                        self.occ_at(leaf, Some(hit), other, false);
                        first = false;
                    }
                }
            }
        }
        let local_name = local.to_string();
        if !self.interesting(&local_name) {
            return;
        }
        let (start, _) = self.pos.range(local.span());
        if target.is_empty() {
            // Something from elsewhere: it shadows, and is nothing this file declares.
            target = vec![(Ns::Value, start, false), (Ns::Type, start, false)];
        }
        for (ns, id, const_like) in target {
            self.scopes[cur].bindings.push(Binding {
                name: local_name.clone(),
                ns,
                id,
                item: true,
                const_like,
            });
        }
    }

    fn resolve_path(&mut self, path: &Path, ns: Ns) {
        if path.leading_colon.is_none() {
            let segs: Vec<&Ident> = path.segments.iter().map(|s| &s.ident).collect();
            match segs.as_slice() {
                [one] => self.occ(one, ns, false),
                [first, second, ..] if *first == "self" || *first == "super" => {
                    let (cur, parent) = self.modules();
                    let m = if *first == "self" { Some(cur) } else { parent };
                    let name = second.to_string();
                    if let Some(m) = m
                        && self.interesting(&name)
                    {
                        let ns = if segs.len() == 2 { ns } else { Ns::Type };
                        let other = if name == self.old {
                            &self.new
                        } else {
                            &self.old
                        };
                        let hit = self.lookup_in(m, &name, ns);
                        let other = self.lookup_in(m, other, ns);
                        self.occ_at(second, hit, other, false);
                    }
                }
                [first, ..] if *first != "crate" && *first != "Self" => {
                    self.occ(first, Ns::Type, false)
                }
                _ => {}
            }
        }
        for s in &path.segments {
            self.visit_path_arguments(&s.arguments);
        }
    }

    /// Bind the names a pattern introduces (its types and paths are uses).
    fn bind_pat(&mut self, pat: &Pat, shorthand: bool) {
        match pat {
            Pat::Ident(pi) => {
                let name = pi.ident.to_string();
                if pi.by_ref.is_none()
                    && pi.mutability.is_none()
                    && pi.subpat.is_none()
                    && self.interesting(&name)
                    && self
                        .lookup(&name, Ns::Value)
                        .is_some_and(|h| self.binding(h).const_like)
                {
                    self.occ(&pi.ident, Ns::Value, shorthand);
                    return;
                }
                if let Some((_, sub)) = &pi.subpat {
                    self.bind_pat(sub, false);
                }
                let kind = if self.param { "parameter" } else { "local" };
                self.declare(&pi.ident, &[Ns::Value], kind, false, false, shorthand);
            }
            Pat::Or(o) => {
                let mut cases = o.cases.iter();
                if let Some(first) = cases.next() {
                    self.bind_pat(first, shorthand);
                }
                // The other alternatives bind the same names: uses of the first's bindings.
                for c in cases {
                    self.rebind_pat(c);
                }
            }
            Pat::Paren(p) => self.bind_pat(&p.pat, shorthand),
            Pat::Reference(r) => self.bind_pat(&r.pat, shorthand),
            Pat::Slice(s) => s.elems.iter().for_each(|p| self.bind_pat(p, false)),
            Pat::Tuple(t) => t.elems.iter().for_each(|p| self.bind_pat(p, false)),
            Pat::TupleStruct(ts) => {
                self.resolve_path(&ts.path, Ns::Value);
                ts.elems.iter().for_each(|p| self.bind_pat(p, false));
            }
            Pat::Struct(ps) => {
                self.resolve_path(&ps.path, Ns::Type);
                for f in &ps.fields {
                    self.bind_pat(&f.pat, f.colon_token.is_none());
                }
            }
            Pat::Path(pp) => self.resolve_path(&pp.path, Ns::Value),
            Pat::Type(pt) => {
                self.visit_type(&pt.ty);
                self.bind_pat(&pt.pat, shorthand);
            }
            Pat::Lit(_) | Pat::Range(_) | Pat::Rest(_) | Pat::Wild(_) => {
                visit::visit_pat(self, pat);
            }
            Pat::Macro(m) => self.visit_macro(&m.mac),
            _ => visit::visit_pat(self, pat),
        }
    }

    fn rebind_pat(&mut self, pat: &Pat) {
        match pat {
            Pat::Ident(pi) => {
                self.occ(&pi.ident, Ns::Value, false);
                if let Some((_, sub)) = &pi.subpat {
                    self.rebind_pat(sub);
                }
            }
            Pat::Or(o) => o.cases.iter().for_each(|c| self.rebind_pat(c)),
            Pat::Paren(p) => self.rebind_pat(&p.pat),
            Pat::Reference(r) => self.rebind_pat(&r.pat),
            Pat::Slice(s) => s.elems.iter().for_each(|p| self.rebind_pat(p)),
            Pat::Tuple(t) => t.elems.iter().for_each(|p| self.rebind_pat(p)),
            Pat::TupleStruct(ts) => {
                self.resolve_path(&ts.path, Ns::Value);
                ts.elems.iter().for_each(|p| self.rebind_pat(p));
            }
            Pat::Struct(ps) => {
                self.resolve_path(&ps.path, Ns::Type);
                for f in &ps.fields {
                    if f.colon_token.is_none()
                        && let Pat::Ident(pi) = &*f.pat
                    {
                        self.occ(&pi.ident, Ns::Value, true);
                    } else {
                        self.rebind_pat(&f.pat);
                    }
                }
            }
            Pat::Path(pp) => self.resolve_path(&pp.path, Ns::Value),
            Pat::Type(pt) => {
                self.visit_type(&pt.ty);
                self.rebind_pat(&pt.pat);
            }
            _ => visit::visit_pat(self, pat),
        }
    }

    fn function(&mut self, sig: &Signature, body: Option<&Block>) {
        self.visit_generics(&sig.generics);
        for input in &sig.inputs {
            if let FnArg::Typed(pt) = input {
                self.visit_type(&pt.ty);
            }
        }
        self.visit_return_type(&sig.output);
        let Some(body) = body else { return };
        self.push(ScopeKind::Item);
        self.param = true;
        for input in &sig.inputs {
            if let FnArg::Typed(pt) = input {
                self.bind_pat(&pt.pat, false);
            }
        }
        self.param = false;
        self.visit_block(body);
        self.pop();
    }

    /// Identifiers inside a macro body that does not parse as expressions.
    fn macro_tokens(&mut self, tokens: TokenStream) {
        for tt in tokens {
            match tt {
                TokenTree::Ident(i) => self.occ(&i, Ns::Value, false),
                TokenTree::Group(g) => self.macro_tokens(g.stream()),
                _ => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for Resolver<'_> {
    fn visit_file(&mut self, f: &'ast syn::File) {
        self.push(ScopeKind::Module);
        self.preregister(f.items.iter());
        for item in &f.items {
            self.visit_item(item);
        }
        self.pop();
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    fn visit_item_use(&mut self, _: &'ast ItemUse) {}

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if let Some((_, items)) = &m.content {
            self.push(ScopeKind::Module);
            self.preregister(items.iter());
            for item in items {
                self.visit_item(item);
            }
            self.pop();
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.function(&f.sig, Some(&f.block));
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.function(&f.sig, Some(&f.block));
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        self.function(&f.sig, f.default.as_ref());
    }

    fn visit_block(&mut self, b: &'ast Block) {
        self.push(ScopeKind::Local);
        self.preregister(b.stmts.iter().filter_map(|s| match s {
            Stmt::Item(i) => Some(i),
            _ => None,
        }));
        for s in &b.stmts {
            self.visit_stmt(s);
        }
        self.pop();
    }

    fn visit_local(&mut self, l: &'ast syn::Local) {
        if let Some(init) = &l.init {
            self.visit_expr(&init.expr);
            if let Some((_, diverge)) = &init.diverge {
                self.visit_expr(diverge);
            }
        }
        self.bind_pat(&l.pat, false);
    }

    fn visit_expr_path(&mut self, e: &'ast syn::ExprPath) {
        if let Some(q) = &e.qself {
            self.visit_type(&q.ty);
            for s in &e.path.segments {
                self.visit_path_arguments(&s.arguments);
            }
            return;
        }
        self.resolve_path(&e.path, Ns::Value);
    }

    fn visit_type_path(&mut self, t: &'ast syn::TypePath) {
        if let Some(q) = &t.qself {
            self.visit_type(&q.ty);
            for s in &t.path.segments {
                self.visit_path_arguments(&s.arguments);
            }
            return;
        }
        self.resolve_path(&t.path, Ns::Type);
    }

    fn visit_path(&mut self, p: &'ast Path) {
        self.resolve_path(p, Ns::Type);
    }

    fn visit_expr_struct(&mut self, e: &'ast syn::ExprStruct) {
        if e.qself.is_none() {
            self.resolve_path(&e.path, Ns::Type);
        }
        for f in &e.fields {
            match (&f.colon_token, &f.expr) {
                (None, Expr::Path(p)) if p.path.get_ident().is_some() => {
                    self.occ(p.path.get_ident().unwrap(), Ns::Value, true)
                }
                _ => self.visit_expr(&f.expr),
            }
        }
        if let Some(rest) = &e.rest {
            self.visit_expr(rest);
        }
    }

    fn visit_expr_closure(&mut self, c: &'ast syn::ExprClosure) {
        self.push(ScopeKind::Local);
        self.param = true;
        for p in &c.inputs {
            self.bind_pat(p, false);
        }
        self.param = false;
        self.visit_return_type(&c.output);
        self.visit_expr(&c.body);
        self.pop();
    }

    fn visit_expr_for_loop(&mut self, f: &'ast syn::ExprForLoop) {
        self.visit_expr(&f.expr);
        self.push(ScopeKind::Local);
        self.bind_pat(&f.pat, false);
        self.visit_block(&f.body);
        self.pop();
    }

    fn visit_arm(&mut self, a: &'ast syn::Arm) {
        self.push(ScopeKind::Local);
        self.bind_pat(&a.pat, false);
        if let Some((_, g)) = &a.guard {
            self.visit_expr(g);
        }
        self.visit_expr(&a.body);
        self.pop();
    }

    fn visit_expr_if(&mut self, e: &'ast syn::ExprIf) {
        self.push(ScopeKind::Local);
        self.visit_expr(&e.cond);
        self.visit_block(&e.then_branch);
        self.pop();
        if let Some((_, els)) = &e.else_branch {
            self.visit_expr(els);
        }
    }

    fn visit_expr_while(&mut self, e: &'ast syn::ExprWhile) {
        self.push(ScopeKind::Local);
        self.visit_expr(&e.cond);
        self.visit_block(&e.body);
        self.pop();
    }

    fn visit_expr_let(&mut self, l: &'ast syn::ExprLet) {
        self.visit_expr(&l.expr);
        self.bind_pat(&l.pat, false);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let was = self.in_macro;
        self.in_macro = true;
        match m.parse_body_with(Punctuated::<Expr, syn::Token![,]>::parse_terminated) {
            Ok(args) => {
                for a in &args {
                    self.visit_expr(a);
                }
            }
            Err(_) => self.macro_tokens(m.tokens.clone()),
        }
        self.in_macro = was;
    }
}

/// Rename `old` to `new` in a Rust file; returns the new text and a summary.
pub fn rename(
    text: &str,
    old: &str,
    new: &str,
    line: Option<usize>,
) -> Result<(String, String), String> {
    let file = parse(text)?;
    let mut r = Resolver {
        pos: Pos::new(text),
        old: old.into(),
        new: new.into(),
        scopes: Vec::new(),
        next_uid: 0,
        decls: Vec::new(),
        occs: Vec::new(),
        in_macro: false,
        param: false,
    };
    r.visit_file(&file);
    // Candidates: declarations named `old` (one per id).
    let mut cands: Vec<&Decl> = Vec::new();
    for d in r.decls.iter().filter(|d| d.is_old) {
        if !cands.iter().any(|c| c.id == d.id) {
            cands.push(d);
        }
    }
    let lines_of = |v: &[&Decl]| {
        v.iter()
            .map(|d| d.line.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if cands.is_empty() {
        return Err(format!(
            "`{old}` is not declared in this file (an item, a local or a parameter); methods, fields and names from other files cannot be renamed here"
        ));
    }
    let target: &Decl = if let Some(l) = line {
        let on: Vec<&Decl> = cands.iter().copied().filter(|d| d.line == l).collect();
        match on.as_slice() {
            [d] => d,
            [] => {
                return Err(format!(
                    "no declaration of `{old}` on line {l}; it is declared on line(s) {}",
                    lines_of(&cands)
                ));
            }
            _ => return Err(format!("several declarations of `{old}` on line {l}")),
        }
    } else if let [d] = cands.as_slice() {
        d
    } else {
        let top: Vec<&Decl> = cands
            .iter()
            .copied()
            .filter(|d| d.item && d.depth == 0)
            .collect();
        match top.as_slice() {
            [d] => d,
            _ => {
                return Err(format!(
                    "`{old}` is declared several times (lines {}); pass `line` to choose one",
                    lines_of(&cands)
                ));
            }
        }
    };
    let id = target.id;
    let target_ns: Vec<Ns> = r
        .decls
        .iter()
        .filter(|d| d.id == id)
        .map(|d| d.ns)
        .collect();
    // A `new` declared in the same scope and namespace would clash.
    if let Some(d) = r.decls.iter().find(|d| {
        !d.is_old
            && d.scope_uid == target.scope_uid
            && target_ns.contains(&d.ns)
            && (target.item || d.item)
    }) {
        return Err(format!(
            "`{new}` is already declared in the same scope (line {}); pick another name",
            d.line
        ));
    }
    let mut edits = vec![Edit::new(
        target.id,
        target.end,
        if target.shorthand {
            format!("{old}: {new}")
        } else {
            new.to_string()
        },
    )];
    let pos = |h: Option<Hit>| h.map(|(d, i, _)| (d, i));
    let mut in_macros = 0;
    for o in &r.occs {
        let line = r.pos.lines.line(o.start);
        if o.is_old && o.own.is_some_and(|h| h.2 == id) {
            if o.other.is_some() && pos(o.other) > pos(o.own) {
                return Err(format!(
                    "renaming would change what `{old}` means on line {line}: a `{new}` in scope there would capture it; pick another name"
                ));
            }
            edits.push(Edit::new(
                o.start,
                o.end,
                if o.shorthand {
                    format!("{old}: {new}")
                } else {
                    new.to_string()
                },
            ));
            in_macros += usize::from(o.in_macro);
        } else if !o.is_old
            && o.other.is_some_and(|h| h.2 == id)
            && (o.own.is_none() || pos(o.own) < pos(o.other))
        {
            return Err(format!(
                "renaming would capture the use of `{new}` on line {line} (it would then mean the renamed `{old}`); pick another name"
            ));
        }
    }
    let count = edits.len();
    let out = apply(text, &edits)?;
    let mut summary = format!(
        "renamed the {} `{old}` (line {}) to `{new}`: {count} occurrence(s)",
        target.kind, target.line
    );
    if in_macros > 0 {
        summary.push_str(&format!(", {in_macros} of them inside macro invocations"));
    }
    Ok((out, summary))
}

// ---------------------------------------------------------------------------------------------
// Outline

fn line_range(item_span: Span, name_span: Span) -> (usize, usize) {
    (name_span.start().line, item_span.end().line)
}

fn entry(name: &str, kind: &str, lines: (usize, usize)) -> Value {
    json!({"name": name, "kind": kind, "line": lines.0, "end_line": lines.1})
}

fn source_of(pos: &Pos<'_>, span: Span) -> String {
    let (a, b) = pos.range(span);
    pos.text[a..b]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn outline_items(pos: &Pos<'_>, items: &[Item]) -> Vec<Value> {
    let mut out = Vec::new();
    for item in items {
        let span = item.span();
        let v = match item {
            Item::Fn(f) => entry(
                &f.sig.ident.to_string(),
                "function",
                line_range(span, f.sig.ident.span()),
            ),
            Item::Struct(s) => entry(
                &s.ident.to_string(),
                "struct",
                line_range(span, s.ident.span()),
            ),
            Item::Enum(e) => {
                let mut v = entry(
                    &e.ident.to_string(),
                    "enum",
                    line_range(span, e.ident.span()),
                );
                v["members"] = e
                    .variants
                    .iter()
                    .map(|var| {
                        entry(
                            &var.ident.to_string(),
                            "variant",
                            line_range(var.span(), var.ident.span()),
                        )
                    })
                    .collect();
                v
            }
            Item::Union(u) => entry(
                &u.ident.to_string(),
                "union",
                line_range(span, u.ident.span()),
            ),
            Item::Trait(t) => {
                let mut v = entry(
                    &t.ident.to_string(),
                    "trait",
                    line_range(span, t.ident.span()),
                );
                v["members"] = t
                    .items
                    .iter()
                    .filter_map(|ti| match ti {
                        TraitItem::Fn(f) => Some(entry(
                            &f.sig.ident.to_string(),
                            "method",
                            line_range(f.span(), f.sig.ident.span()),
                        )),
                        TraitItem::Type(t) => Some(entry(
                            &t.ident.to_string(),
                            "type",
                            line_range(t.span(), t.ident.span()),
                        )),
                        TraitItem::Const(c) => Some(entry(
                            &c.ident.to_string(),
                            "const",
                            line_range(c.span(), c.ident.span()),
                        )),
                        _ => None,
                    })
                    .collect();
                v
            }
            Item::Type(t) => entry(
                &t.ident.to_string(),
                "type",
                line_range(span, t.ident.span()),
            ),
            Item::Const(c) => entry(
                &c.ident.to_string(),
                "const",
                line_range(span, c.ident.span()),
            ),
            Item::Static(s) => entry(
                &s.ident.to_string(),
                "static",
                line_range(span, s.ident.span()),
            ),
            Item::Mod(m) => {
                let mut v = entry(
                    &m.ident.to_string(),
                    "module",
                    line_range(span, m.ident.span()),
                );
                if let Some((_, items)) = &m.content {
                    v["members"] = Value::Array(outline_items(pos, items));
                }
                v
            }
            Item::Impl(i) => {
                let mut name = source_of(pos, i.self_ty.span());
                if let Some((_, t, _)) = &i.trait_ {
                    name = format!("{} for {name}", source_of(pos, t.span()));
                }
                let mut v = entry(&name, "impl", line_range(span, i.impl_token.span));
                v["members"] = i
                    .items
                    .iter()
                    .filter_map(|ii| match ii {
                        ImplItem::Fn(f) => Some(entry(
                            &f.sig.ident.to_string(),
                            "method",
                            line_range(f.span(), f.sig.ident.span()),
                        )),
                        ImplItem::Const(c) => Some(entry(
                            &c.ident.to_string(),
                            "const",
                            line_range(c.span(), c.ident.span()),
                        )),
                        ImplItem::Type(t) => Some(entry(
                            &t.ident.to_string(),
                            "type",
                            line_range(t.span(), t.ident.span()),
                        )),
                        _ => None,
                    })
                    .collect();
                v
            }
            Item::Use(u) => entry(
                &source_of(pos, u.tree.span()),
                "use",
                line_range(span, u.use_token.span),
            ),
            Item::Macro(m) => match &m.ident {
                Some(id) => entry(&id.to_string(), "macro", line_range(span, id.span())),
                None => continue,
            },
            _ => continue,
        };
        out.push(v);
    }
    out
}

/// The file's items with kinds and lines (impls, traits, enums and inline modules with members).
pub fn outline(text: &str) -> Result<Vec<Value>, String> {
    let file = parse(text)?;
    Ok(outline_items(&Pos::new(text), &file.items))
}

// ---------------------------------------------------------------------------------------------
// `use` items

/// One leaf of a use tree: its path and its last part (`Name`, `self`, `*`, `Name as Other`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leaf {
    path: Vec<String>,
    last: String,
}

fn flatten(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<Leaf>) {
    let leaf = |prefix: &Vec<String>, last: String| Leaf {
        path: prefix.clone(),
        last,
    };
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => out.push(leaf(prefix, n.ident.to_string())),
        UseTree::Rename(r) => out.push(leaf(prefix, format!("{} as {}", r.ident, r.rename))),
        UseTree::Glob(_) => out.push(leaf(prefix, "*".into())),
        UseTree::Group(g) => g.items.iter().for_each(|t| flatten(t, prefix, out)),
    }
}

fn leaves_of(tree: &UseTree) -> Vec<Leaf> {
    let mut out = Vec::new();
    flatten(tree, &mut Vec::new(), &mut out);
    out
}

fn sort_key(s: &str) -> (u8, String) {
    (if s == "self" { 0 } else { 1 }, s.to_string())
}

/// Render leaves as one tree (`a::{b, c::d}`).
fn render(leaves: &[Leaf]) -> Vec<String> {
    let mut terminals: Vec<String> = Vec::new();
    let mut groups: Vec<(String, Vec<Leaf>)> = Vec::new();
    for l in leaves {
        if l.path.is_empty() {
            if !terminals.contains(&l.last) {
                terminals.push(l.last.clone());
            }
        } else {
            let rest = Leaf {
                path: l.path[1..].to_vec(),
                last: l.last.clone(),
            };
            match groups.iter_mut().find(|(k, _)| *k == l.path[0]) {
                Some((_, v)) => v.push(rest),
                None => groups.push((l.path[0].clone(), vec![rest])),
            }
        }
    }
    let mut items = terminals;
    for (key, sub) in groups {
        let inner = render(&sub);
        items.push(if inner.len() == 1 {
            format!("{key}::{}", inner[0])
        } else {
            format!("{key}::{{{}}}", inner.join(", "))
        });
    }
    items.sort_by_key(|s| sort_key(s));
    items
}

fn render_use(u: &ItemUse, leaves: &[Leaf]) -> String {
    let items = render(leaves);
    let tree = if items.len() == 1 {
        items[0].clone()
    } else {
        format!("{{{}}}", items.join(", "))
    };
    format!(
        "use {}{tree};",
        if u.leading_colon.is_some() { "::" } else { "" }
    )
}

/// The range from `use` to `;` of an item (attributes and visibility stay).
fn use_range(pos: &Pos<'_>, u: &ItemUse) -> (usize, usize) {
    (
        pos.range(u.use_token.span).0,
        pos.range(u.semi_token.span).1,
    )
}

fn top_uses(file: &syn::File) -> Vec<&ItemUse> {
    file.items
        .iter()
        .filter_map(|i| match i {
            Item::Use(u) => Some(u),
            _ => None,
        })
        .collect()
}

/// Add or remove a `use`; returns the new text and a summary.
pub fn imports(text: &str, spec: &str, add: bool) -> Result<(String, String), String> {
    let op = if add { "add_import" } else { "remove_import" };
    let spec = spec
        .trim()
        .trim_start_matches("use ")
        .trim_end_matches(';')
        .trim();
    let tree: UseTree = syn::parse_str(spec).map_err(|e| {
        format!("{op}: `{spec}` is not a use path ({e}); e.g. \"std::collections::HashMap\"")
    })?;
    let wanted = leaves_of(&tree);
    let mut text = text.to_string();
    let mut done = Vec::new();
    let mut skipped = Vec::new();
    for leaf in wanted {
        let shown = render(std::slice::from_ref(&leaf))[0].clone();
        let file = parse(&text)?;
        let pos = Pos::new(&text);
        let uses = top_uses(&file);
        let edit = if add {
            if uses.iter().any(|u| leaves_of(&u.tree).contains(&leaf)) {
                skipped.push(shown);
                continue;
            }
            let group = uses.iter().find(|u| {
                !leaf.path.is_empty() && leaves_of(&u.tree).iter().any(|l| l.path == leaf.path)
            });
            match group {
                Some(u) => {
                    let mut all = leaves_of(&u.tree);
                    all.push(leaf.clone());
                    let (a, b) = use_range(&pos, u);
                    Edit::new(a, b, render_use(u, &all))
                }
                None => {
                    let line = format!("use {shown};\n");
                    let at = match uses.last() {
                        Some(u) => {
                            let end = pos.range(u.span()).1;
                            pos.lines.full_lines(&text, end, end).1
                        }
                        None => match file.items.first() {
                            Some(first) => {
                                let start = pos.range(first.span()).0;
                                pos.lines.full_lines(&text, start, start).0
                            }
                            None => text.len(),
                        },
                    };
                    let prefix = if at > 0 && !text[..at].ends_with('\n') {
                        "\n"
                    } else {
                        ""
                    };
                    Edit::new(at, at, format!("{prefix}{line}"))
                }
            }
        } else {
            let Some(u) = uses.iter().find(|u| leaves_of(&u.tree).contains(&leaf)) else {
                return Err(format!(
                    "remove_import: no `use` of `{shown}` at the top level of the file"
                ));
            };
            let rest: Vec<Leaf> = leaves_of(&u.tree)
                .into_iter()
                .filter(|l| *l != leaf)
                .collect();
            if rest.is_empty() {
                let (a, b) = pos.range(u.span());
                let (la, lb) = pos.lines.full_lines(&text, a, b);
                if text[la..a].trim().is_empty() && text[b..lb].trim().is_empty() {
                    Edit::new(la, lb, "")
                } else {
                    Edit::new(a, b, "")
                }
            } else {
                let (a, b) = use_range(&pos, u);
                Edit::new(a, b, render_use(u, &rest))
            }
        };
        text = apply(&text, &[edit])?;
        done.push(shown);
    }
    let mut summary = if done.is_empty() {
        "nothing changed".to_string()
    } else if add {
        format!("added use of {}", done.join(", "))
    } else {
        format!("removed use of {}", done.join(", "))
    };
    if !skipped.is_empty() {
        summary.push_str(&format!("; already imported: {}", skipped.join(", ")));
    }
    Ok((text, summary))
}

#[cfg(test)]
mod tests {
    use crate::tests::{mem, run_err, run_ok};
    use serde_json::json;

    const SRC: &str = r#"use std::fmt;

/// compute doubles
fn compute(x: i32) -> i32 {
    x * 2
}

fn main() {
    let a = compute(1);
    // compute is documented
    let s = "compute";
    {
        let compute = 5;
        println!("{} {}", compute, s);
    }
    let f = compute;
    println!("{}", compute(a) + f(2));
}

mod tests {
    use super::*;
    fn t() { assert_eq!(compute(2), 4); }
}
"#;

    #[test]
    fn rename_fn_leaves_shadow_string_comment() {
        let src = mem(&[("src/main.rs", SRC)]);
        let out = run_ok(
            &src,
            json!({"operation":"rename","path":"src/main.rs","symbol":"compute","new_name":"double"}),
        );
        let want = SRC
            .replace("fn compute(", "fn double(")
            .replace("let a = compute(1)", "let a = double(1)")
            .replace("let f = compute;", "let f = double;")
            .replace("compute(a) + f(2)", "double(a) + f(2)")
            .replace("assert_eq!(compute(2)", "assert_eq!(double(2)");
        assert_eq!(out["src/main.rs"], want);
    }

    #[test]
    fn rename_local_by_line_and_shorthand() {
        let t = "struct P { x: i32 }\nfn f(x: i32) -> P {\n    let y = x + 1;\n    P { x }\n}\nfn g(p: P) -> i32 { let P { x } = p; x }\n";
        let src = mem(&[("a.rs", t)]);
        let out = run_ok(
            &src,
            json!({"operation":"rename","path":"a.rs","symbol":"x","new_name":"v","line":2}),
        );
        assert_eq!(
            out["a.rs"],
            "struct P { x: i32 }\nfn f(v: i32) -> P {\n    let y = v + 1;\n    P { x: v }\n}\nfn g(p: P) -> i32 { let P { x } = p; x }\n"
        );
        let out = run_ok(
            &src,
            json!({"operation":"rename","path":"a.rs","symbol":"x","new_name":"w","line":6}),
        );
        assert_eq!(
            out["a.rs"],
            "struct P { x: i32 }\nfn f(x: i32) -> P {\n    let y = x + 1;\n    P { x }\n}\nfn g(p: P) -> i32 { let P { x: w } = p; w }\n"
        );
        assert!(
            run_err(
                &src,
                json!({"operation":"rename","path":"a.rs","symbol":"x","new_name":"y","line":2})
            )
            .contains("capture")
        );
        assert!(
            run_err(
                &src,
                json!({"operation":"rename","path":"a.rs","symbol":"x","new_name":"z"})
            )
            .contains("several")
        );
        assert!(
            run_err(
                &src,
                json!({"operation":"rename","path":"a.rs","symbol":"x","new_name":"fn","line":2})
            )
            .contains("keyword")
        );
        assert!(
            run_err(
                &src,
                json!({"operation":"rename","path":"a.rs","symbol":"nope","new_name":"z"})
            )
            .contains("not declared")
        );
    }

    #[test]
    fn rename_types() {
        let t = "pub struct Point(i32);\nimpl Point { fn new() -> Self { Point(0) } }\nfn f(p: &Point) -> Vec<Point> { vec![Point(1)] }\n";
        let src = mem(&[("a.rs", t)]);
        let out = run_ok(
            &src,
            json!({"operation":"rename","path":"a.rs","symbol":"Point","new_name":"Spot"}),
        );
        assert_eq!(out["a.rs"], t.replace("Point", "Spot"));
        let clash = mem(&[("a.rs", "struct A; struct B;\n")]);
        assert!(
            run_err(
                &clash,
                json!({"operation":"rename","path":"a.rs","symbol":"A","new_name":"B"})
            )
            .contains("already declared")
        );
    }

    #[test]
    fn uses_merge_dedup_remove() {
        let t = "use std::collections::{BTreeMap, HashSet};\nuse std::fmt;\n\nfn main() {}\n";
        let src = mem(&[("a.rs", t)]);
        let out = run_ok(
            &src,
            json!({"operation":"add_import","path":"a.rs","use":"std::collections::HashMap"}),
        );
        assert_eq!(
            out["a.rs"],
            "use std::collections::{BTreeMap, HashMap, HashSet};\nuse std::fmt;\n\nfn main() {}\n"
        );
        assert!(
            run_ok(
                &src,
                json!({"operation":"add_import","path":"a.rs","use":"std::fmt"})
            )
            .is_empty()
        );
        let out = run_ok(
            &src,
            json!({"operation":"add_import","path":"a.rs","use":"std::io::{self, Read}"}),
        );
        assert_eq!(
            out["a.rs"],
            "use std::collections::{BTreeMap, HashSet};\nuse std::fmt;\nuse std::io::{self, Read};\n\nfn main() {}\n"
        );
        let out = run_ok(
            &src,
            json!({"operation":"remove_import","path":"a.rs","use":"std::collections::HashSet"}),
        );
        assert_eq!(
            out["a.rs"],
            "use std::collections::BTreeMap;\nuse std::fmt;\n\nfn main() {}\n"
        );
        let out = run_ok(
            &src,
            json!({"operation":"remove_import","path":"a.rs","use":"std::fmt"}),
        );
        assert_eq!(
            out["a.rs"],
            "use std::collections::{BTreeMap, HashSet};\n\nfn main() {}\n"
        );
        assert!(
            run_err(
                &src,
                json!({"operation":"remove_import","path":"a.rs","use":"std::io"})
            )
            .contains("no `use`")
        );
        let none = mem(&[("b.rs", "//! doc\n\nfn main() {}\n")]);
        let out = run_ok(
            &none,
            json!({"operation":"add_import","path":"b.rs","use":"std::fmt::Write"}),
        );
        assert_eq!(
            out["b.rs"],
            "//! doc\n\nuse std::fmt::Write;\nfn main() {}\n"
        );
    }

    #[test]
    fn outline_items() {
        let src = mem(&[("a.rs", SRC)]);
        let out = crate::run(&json!({"operation":"outline","path":"a.rs"}), &src).unwrap();
        let s = out["symbols"].as_array().unwrap();
        let got: Vec<(&str, &str, u64, u64)> = s
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().unwrap(),
                    v["kind"].as_str().unwrap(),
                    v["line"].as_u64().unwrap(),
                    v["end_line"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("std::fmt", "use", 1, 1),
                ("compute", "function", 4, 6),
                ("main", "function", 8, 18),
                ("tests", "module", 20, 23)
            ]
        );
        assert_eq!(s[3]["members"][1]["name"], "t");
    }
}
