//! CEL `x-kubernetes-validations` rules, evaluated with the `cel` crate.
//!
//! A rule is enforced only if it compiles and uses nothing but the supported functions (see
//! [`SUPPORTED_FUNCTIONS`]) and the variables `self` and `oldSelf`; the others are skipped at
//! validation time and listed by `unchecked_rules`.

use super::format::bad_value;
use super::schema::{flag, schema_types, Walker};
use super::{reason, Path, Seg};
use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::extractors::This;
use cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

/// The functions and operators (as the parser names them) a rule may use.
pub(crate) const SUPPORTED_FUNCTIONS: &[&str] = &[
    // Operators.
    "_+_",
    "_-_",
    "_*_",
    "_/_",
    "_%_",
    "_==_",
    "_!=_",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "_&&_",
    "_||_",
    "!_",
    "-_",
    "_?_:_",
    "_[_]",
    "@in",
    "@not_strictly_false",
    "_?._",
    "_[?_]",
    // Standard functions and conversions.
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "type",
    "dyn",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    // Kubernetes' string library (cel-go ext.Strings).
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "join",
    // Optionals.
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "orValue",
    "hasValue",
    "value",
    "or",
    // Kubernetes' list library (on lists), implemented here.
    "sum",
    "min",
    "max",
    "isSorted",
    // Kubernetes' regex library, implemented here.
    "find",
    "findAll",
];

/// Namespaces of qualified function names (`optional.of`).
const NAMESPACES: &[&str] = &["optional", "math", "strings", "lists", "base64", "sets"];

/// Identifiers naming types, usable in rules (`type(x) == int`).
const TYPE_IDENTS: &[&str] =
    &["int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type", "dyn"];

/// CEL reserved words: properties so named are `__name__` in rules.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A compiled rule.
struct Compiled {
    program: Program,
    uses_old_self: bool,
}

fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Declared once on a fresh environment: cannot conflict.
        let _ = env.add_extension(cel::extensions::strings);
        Arc::new(env)
    })
}

type ProgramCache = Mutex<HashMap<String, Result<Arc<Compiled>, String>>>;

/// Compiles `src` (once) and checks it uses only what is supported; `Err` says why not.
fn compile(src: &str) -> Result<Arc<Compiled>, String> {
    static CACHE: OnceLock<ProgramCache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(src) {
        return hit.clone();
    }
    let result = compile_uncached(src);
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() > 4096 {
        cache.clear();
    }
    cache.insert(src.to_string(), result.clone());
    result
}

fn compile_uncached(src: &str) -> Result<Arc<Compiled>, String> {
    if src.trim().is_empty() {
        return Err("empty rule".to_string());
    }
    let program = match catch_unwind(AssertUnwindSafe(|| env().compile(src))) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            let msg = e.to_string().replace('\n', " ");
            return Err(format!("does not compile: {}", msg.trim()));
        }
        Err(_) => return Err("does not compile (the CEL parser panicked)".to_string()),
    };
    let mut a = Analysis::default();
    analyze(program.expression(), &mut Vec::new(), &mut a);
    if !a.bad_functions.is_empty() {
        let list: Vec<&str> = a.bad_functions.iter().map(String::as_str).collect();
        return Err(format!("uses unsupported function(s): {}", list.join(", ")));
    }
    if !a.bad_variables.is_empty() {
        let list: Vec<&str> = a.bad_variables.iter().map(String::as_str).collect();
        return Err(format!("references unknown variable(s): {}", list.join(", ")));
    }
    if a.structs {
        return Err("uses message (struct) literals".to_string());
    }
    Ok(Arc::new(Compiled { program, uses_old_self: a.uses_old_self }))
}

#[derive(Default)]
struct Analysis {
    bad_functions: BTreeSet<String>,
    bad_variables: BTreeSet<String>,
    uses_old_self: bool,
    structs: bool,
}

/// Collects the functions and free variables of `e`; `scope` holds comprehension variables.
fn analyze(e: &IdedExpr, scope: &mut Vec<String>, a: &mut Analysis) {
    match &e.expr {
        Expr::Call(call) => {
            let qualified = match call.target.as_deref() {
                Some(IdedExpr { expr: Expr::Ident(ns), .. })
                    if NAMESPACES.contains(&ns.as_str()) && !scope.contains(ns) =>
                {
                    Some(format!("{ns}.{}", call.func_name))
                }
                _ => None,
            };
            let name = qualified.clone().unwrap_or_else(|| call.func_name.clone());
            if !SUPPORTED_FUNCTIONS.contains(&name.as_str()) {
                a.bad_functions.insert(name);
            }
            if qualified.is_none() {
                if let Some(t) = &call.target {
                    analyze(t, scope, a);
                }
            }
            for arg in &call.args {
                analyze(arg, scope, a);
            }
        }
        Expr::Comprehension(c) => {
            analyze(&c.iter_range, scope, a);
            analyze(&c.accu_init, scope, a);
            let depth = scope.len();
            scope.push(c.iter_var.clone());
            if let Some(v2) = &c.iter_var2 {
                scope.push(v2.clone());
            }
            scope.push(c.accu_var.clone());
            analyze(&c.loop_cond, scope, a);
            analyze(&c.loop_step, scope, a);
            analyze(&c.result, scope, a);
            scope.truncate(depth);
        }
        Expr::Ident(name) => {
            if name == "oldSelf" {
                a.uses_old_self = true;
            } else if !(name == "self"
                || name.starts_with('@')
                || scope.contains(name)
                || TYPE_IDENTS.contains(&name.as_str()))
            {
                a.bad_variables.insert(name.clone());
            }
        }
        Expr::List(l) => {
            for el in &l.elements {
                analyze(el, scope, a);
            }
        }
        Expr::Map(m) => {
            for entry in &m.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(me) => {
                        analyze(&me.key, scope, a);
                        analyze(&me.value, scope, a);
                    }
                    EntryExpr::StructField(_) => a.structs = true,
                }
            }
        }
        Expr::Select(s) => analyze(&s.operand, scope, a),
        Expr::Struct(_) => a.structs = true,
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// Why the rule object `rule` on the schema node `schema` is not enforced, if it is not.
pub(super) fn unsupported_reason(rule: &Value, schema: &Value) -> Option<String> {
    let Some(src) = rule.get("rule").and_then(Value::as_str) else {
        return Some("the rule has no `rule` string".to_string());
    };
    if let Err(why) = compile(src) {
        return Some(why);
    }
    if let Some(fp) = rule.get("fieldPath").and_then(Value::as_str) {
        if let Err(why) = parse_field_path(fp, schema) {
            return Some(format!("fieldPath {fp:?}: {why}"));
        }
    }
    None
}

/// Parses a rule's `fieldPath` (`.a.b`, `['a.b']`) relative to the schema node carrying it.
fn parse_field_path(fp: &str, schema: &Value) -> Result<Vec<Seg>, String> {
    let mut segs = Vec::new();
    let mut s = schema;
    let chars: Vec<char> = fp.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let name = match chars[i] {
            '.' => {
                let start = i + 1;
                let mut j = start;
                while j < chars.len() && chars[j] != '.' && chars[j] != '[' {
                    j += 1;
                }
                if j == start {
                    return Err("unexpected end of JSON path".to_string());
                }
                i = j;
                chars[start..j].iter().collect::<String>()
            }
            '[' => {
                if chars.get(i + 1) != Some(&'\'') {
                    return Err("expected a single quoted string".to_string());
                }
                let mut j = i + 2;
                let mut name = String::new();
                loop {
                    match chars.get(j) {
                        None => return Err("unexpected end of JSON path".to_string()),
                        Some('\\') => {
                            let c = chars.get(j + 1).ok_or("unexpected end of JSON path")?;
                            name.push(match c {
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                other => *other,
                            });
                            j += 2;
                        }
                        Some('\'') => break,
                        Some(c) => {
                            name.push(*c);
                            j += 1;
                        }
                    }
                }
                if chars.get(j + 1) != Some(&']') {
                    return Err("expected ]".to_string());
                }
                i = j + 2;
                name
            }
            other => return Err(format!("expected [ or . but got: {other}")),
        };
        if let Some(ps) = s.get("properties").and_then(|p| p.as_object()) {
            let Some(next) = ps.get(&name) else {
                return Err("does not refer to a valid field".to_string());
            };
            segs.push(Seg::Field(name));
            s = next;
        } else if let Some(ap @ Value::Object(_)) = s.get("additionalProperties") {
            segs.push(Seg::Key(name));
            s = ap;
        } else {
            return Err("does not refer to a valid field".to_string());
        }
    }
    Ok(segs)
}

/// Escapes a property name as Kubernetes exposes it to CEL; `None` if it is not accessible.
fn escape_property(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut chars = name.chars();
    let first = chars.next()?;
    let ok_first = first.is_ascii_alphabetic() || matches!(first, '_' | '.' | '-' | '/');
    if !ok_first || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/')) {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if let Some(r) = rest.strip_prefix("__") {
            out.push_str("__underscores__");
            rest = r;
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

/// Converts a JSON value to CEL, typed by its schema node: integers are `int`s, `number`s are
/// `double`s, properties are escaped; at the root (and in embedded resources) `apiVersion`,
/// `kind` and `metadata` (only `name` and `generateName` of it) are visible too.
fn to_cel(s: &Value, v: &Value, root: bool) -> CelValue {
    let so = s.as_object();
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => {
            let is_number = so.is_some_and(|so| schema_types(so) == ["number"]);
            if is_number {
                CelValue::Float(n.as_f64().unwrap_or(0.0))
            } else if let Some(i) = n.as_i64() {
                CelValue::Int(i)
            } else if let Some(u) = n.as_u64() {
                CelValue::UInt(u)
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 9.2e18 {
                    CelValue::Int(f as i64)
                } else {
                    CelValue::Float(f)
                }
            }
        }
        Value::String(st) => CelValue::String(Arc::new(st.clone())),
        Value::Array(a) => {
            let items = s.get("items").unwrap_or(&Value::Null);
            CelValue::List(Arc::new(a.iter().map(|x| to_cel(items, x, false)).collect()))
        }
        Value::Object(m) => {
            let meta = root || so.is_some_and(|so| flag(so, "x-kubernetes-embedded-resource"));
            let props = s.get("properties").and_then(Value::as_object);
            let additional = match s.get("additionalProperties") {
                Some(ap @ Value::Object(_)) => Some(ap),
                _ => None,
            };
            let preserve = so.is_none_or(|so| flag(so, "x-kubernetes-preserve-unknown-fields"));
            let mut out: HashMap<String, CelValue> = HashMap::new();
            for (k, val) in m {
                if meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    let converted = if k == "metadata" && root {
                        let mut md = HashMap::new();
                        for f in ["name", "generateName"] {
                            if let Some(Value::String(x)) = val.get(f) {
                                md.insert(f.to_string(), CelValue::String(Arc::new(x.clone())));
                            }
                        }
                        CelValue::Map(md.into())
                    } else {
                        to_cel(&Value::Null, val, false)
                    };
                    out.insert(k.clone(), converted);
                } else if let Some(ps) = props.and_then(|p| p.get(k)) {
                    if let Some(name) = escape_property(k) {
                        out.insert(name, to_cel(ps, val, false));
                    }
                } else if let Some(ap) = additional {
                    out.insert(k.clone(), to_cel(ap, val, false));
                } else if preserve {
                    out.insert(k.clone(), to_cel(&Value::Null, val, false));
                }
            }
            CelValue::Map(out.into())
        }
    }
}

fn function_error(name: &str, msg: &str) -> ExecutionError {
    ExecutionError::function_error(name, msg)
}

/// `list.sum()`: of ints, uints or doubles; `0` for an empty list.
fn list_sum(This(this): This<CelValue>) -> Result<CelValue, ExecutionError> {
    let CelValue::List(items) = this else {
        return Err(function_error("sum", "sum() needs a list"));
    };
    let mut acc = match items.first() {
        None => return Ok(CelValue::Int(0)),
        Some(CelValue::Int(_)) => CelValue::Int(0),
        Some(CelValue::UInt(_)) => CelValue::UInt(0),
        Some(CelValue::Float(_)) => CelValue::Float(0.0),
        Some(_) => return Err(function_error("sum", "sum() needs a list of numbers")),
    };
    for item in items.iter() {
        acc = match (acc, item) {
            (CelValue::Int(a), CelValue::Int(b)) => {
                CelValue::Int(a.checked_add(*b).ok_or_else(|| function_error("sum", "integer overflow"))?)
            }
            (CelValue::UInt(a), CelValue::UInt(b)) => {
                CelValue::UInt(a.checked_add(*b).ok_or_else(|| function_error("sum", "unsigned integer overflow"))?)
            }
            (CelValue::Float(a), CelValue::Float(b)) => CelValue::Float(a + b),
            _ => return Err(function_error("sum", "sum() needs a list of one numeric type")),
        };
    }
    Ok(acc)
}

fn list_extreme(name: &str, this: CelValue, want: std::cmp::Ordering) -> Result<CelValue, ExecutionError> {
    let CelValue::List(items) = this else {
        return Err(function_error(name, "needs a list"));
    };
    let mut best: Option<&CelValue> = None;
    for item in items.iter() {
        best = Some(match best {
            None => item,
            Some(b) => match item.partial_cmp(b) {
                Some(o) if o == want => item,
                Some(_) => b,
                None => return Err(function_error(name, "list elements are not comparable")),
            },
        });
    }
    best.cloned().ok_or_else(|| function_error(name, &format!("{name}() called on an empty list")))
}

fn list_is_sorted(This(this): This<CelValue>) -> Result<bool, ExecutionError> {
    let CelValue::List(items) = this else {
        return Err(function_error("isSorted", "needs a list"));
    };
    for pair in items.windows(2) {
        match pair[0].partial_cmp(&pair[1]) {
            Some(std::cmp::Ordering::Greater) => return Ok(false),
            Some(_) => {}
            None => return Err(function_error("isSorted", "list elements are not comparable")),
        }
    }
    Ok(true)
}

fn regex_for(name: &str, re: &str) -> Result<Arc<regex::Regex>, ExecutionError> {
    super::schema::compiled_pattern(re)
        .ok_or_else(|| function_error(name, &format!("invalid regular expression {re:?}")))
}

/// `string.find(regex)`: the first match, or `''`.
fn string_find(This(this): This<Arc<String>>, re: Arc<String>) -> Result<CelValue, ExecutionError> {
    let re = regex_for("find", &re)?;
    let found = re.find(&this).map(|m| m.as_str().to_string()).unwrap_or_default();
    Ok(CelValue::String(Arc::new(found)))
}

/// `string.findAll(regex)`: every match.
fn string_find_all(This(this): This<Arc<String>>, re: Arc<String>) -> Result<CelValue, ExecutionError> {
    let re = regex_for("findAll", &re)?;
    let all = re.find_iter(&this).map(|m| CelValue::String(Arc::new(m.as_str().to_string()))).collect();
    Ok(CelValue::List(Arc::new(all)))
}

/// Evaluates rules; holds the root context with the Kubernetes library functions.
pub(super) struct Evaluator {
    root: Context<'static, 'static>,
}

impl Evaluator {
    pub(super) fn new() -> Evaluator {
        let mut root = Context::with_env(Arc::clone(env()));
        // None of these names is an overload of the environment, so none can fail; a failure
        // would only leave the function undeclared (and its rules erroring).
        let _ = root.add_function("sum", list_sum);
        let _ =
            root.add_function("min", |This(this): This<CelValue>| list_extreme("min", this, std::cmp::Ordering::Less));
        let _ = root
            .add_function("max", |This(this): This<CelValue>| list_extreme("max", this, std::cmp::Ordering::Greater));
        let _ = root.add_function("isSorted", list_is_sorted);
        let _ = root.add_function("find", string_find);
        let _ = root.add_function("findAll", string_find_all);
        Evaluator { root }
    }

    /// `optional.of(v)`, or `optional.none()` for `None`.
    fn optional(&self, v: Option<CelValue>) -> Option<CelValue> {
        let src = if v.is_some() { "optional.of(x)" } else { "optional.none()" };
        let program = env().compile(src).ok()?;
        let mut ctx = self.root.new_inner_scope();
        if let Some(v) = v {
            ctx.add_variable_from_value("x", v);
        }
        catch_unwind(AssertUnwindSafe(|| program.execute(&ctx))).ok()?.ok()
    }

    /// Runs the rules `rules` of the schema node `s` on the value `v` at `path`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn eval_node(
        &self,
        w: &mut Walker<'_>,
        rules: &[Value],
        s: &Value,
        v: &Value,
        old: Option<&Value>,
        path: &Path,
        ratchet: bool,
        root: bool,
    ) {
        let sts_type = s.get("type").and_then(Value::as_str).unwrap_or("");
        let mut self_val: Option<CelValue> = None;
        for rule in rules {
            let Some(ro) = rule.as_object() else {
                continue;
            };
            let Some(src) = ro.get("rule").and_then(Value::as_str) else {
                continue;
            };
            let Ok(compiled) = compile(src) else {
                continue;
            };
            let field_path = ro.get("fieldPath").and_then(Value::as_str).unwrap_or("");
            let Ok(extra) = parse_field_path(field_path, s) else {
                continue;
            };
            let optional_old = ro.get("optionalOldSelf").and_then(Value::as_bool) == Some(true);
            if compiled.uses_old_self && old.is_none() && !optional_old {
                // Transition rules run only on updates with a correlatable old value.
                continue;
            }
            let this = self_val.get_or_insert_with(|| to_cel(s, v, root)).clone();
            let mut ctx = self.root.new_inner_scope();
            ctx.add_variable_from_value("self", this);
            if compiled.uses_old_self {
                let old_val = old.map(|o| to_cel(s, o, root));
                let bound = if optional_old { self.optional(old_val) } else { old_val };
                let Some(bound) = bound else {
                    continue;
                };
                ctx.add_variable_from_value("oldSelf", bound);
            }
            let message = ro.get("message").and_then(Value::as_str).map(str::trim).unwrap_or("");
            let rule_error_string = if message.is_empty() { src.trim() } else { message };

            let outcome = catch_unwind(AssertUnwindSafe(|| compiled.program.execute(&ctx)));
            match outcome {
                Ok(Ok(CelValue::Bool(false))) => {}
                Ok(Err(e)) => {
                    let detail = match &e {
                        // An undeclared reference is unsupported, not an invalid object.
                        ExecutionError::UndeclaredReference(_) => continue,
                        ExecutionError::NoSuchOverload(_) | ExecutionError::UnsupportedBinaryOperator(..) => format!(
                            "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {rule_error_string}"
                        ),
                        ExecutionError::NoSuchKey(k) => {
                            format!("no such key: {k} evaluating rule: {rule_error_string}")
                        }
                        ExecutionError::IndexOutOfBounds(i) => format!(
                            "index out of bounds: {} evaluating rule: {rule_error_string}",
                            cel_scalar(i)
                        ),
                        ExecutionError::DivisionByZero(_) => {
                            format!("division by zero evaluating rule: {rule_error_string}")
                        }
                        ExecutionError::RemainderByZero(_) => {
                            format!("modulus by zero evaluating rule: {rule_error_string}")
                        }
                        ExecutionError::Overflow(..) => {
                            format!("integer overflow evaluating rule: {rule_error_string}")
                        }
                        other => format!("{other} evaluating rule: {rule_error_string}"),
                    };
                    w.push(
                        path,
                        path.field_path(),
                        reason::INVALID,
                        format!("Invalid value: \"{sts_type}\": {detail}"),
                    );
                    continue;
                }
                // True, a non-boolean (would not compile in Kubernetes), or a panic.
                _ => continue,
            }

            // The rule evaluated to false.
            if ratchet && !compiled.uses_old_self {
                continue;
            }
            let mut err_path = path.clone();
            err_path.0.extend(extra);
            let detail = ro
                .get("messageExpression")
                .and_then(Value::as_str)
                .and_then(|me| self.message_expression(me, &ctx))
                .unwrap_or_else(|| {
                    if message.is_empty() {
                        format!("failed rule: {}", src.trim())
                    } else {
                        message.to_string()
                    }
                });
            let value = if matches!(sts_type, "object" | "array") { None } else { Some(bad_value(v)) };
            let (reason, text) = match ro.get("reason").and_then(Value::as_str) {
                Some(reason::FORBIDDEN) => (reason::FORBIDDEN, format!("Forbidden: {detail}")),
                Some(reason::REQUIRED) => (reason::REQUIRED, format!("Required value: {detail}")),
                Some(reason::DUPLICATE) => (
                    reason::DUPLICATE,
                    match &value {
                        Some(val) => format!("Duplicate value: {val}"),
                        None => "Duplicate value".to_string(),
                    },
                ),
                _ => (
                    reason::INVALID,
                    match &value {
                        Some(val) => format!("Invalid value: {val}: {detail}"),
                        None => format!("Invalid value: {detail}"),
                    },
                ),
            };
            w.push(&err_path, err_path.field_path(), reason, text);
        }
    }

    /// Evaluates a `messageExpression`: `None` (so the static message is used) unless it is
    /// supported and gives a non-empty single-line string.
    fn message_expression(&self, src: &str, ctx: &Context<'_, '_>) -> Option<String> {
        let compiled = compile(src).ok()?;
        let out = catch_unwind(AssertUnwindSafe(|| compiled.program.execute(ctx))).ok()?;
        match out {
            Ok(CelValue::String(s)) => {
                let t = s.trim();
                (!t.is_empty() && !t.contains('\n') && t.len() <= 5 * 1024).then(|| t.to_string())
            }
            _ => None,
        }
    }
}

fn cel_scalar(v: &CelValue) -> String {
    match v {
        CelValue::Int(i) => i.to_string(),
        CelValue::UInt(u) => u.to_string(),
        CelValue::Float(f) => f.to_string(),
        CelValue::String(s) => s.to_string(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_property_names_like_kubernetes() {
        assert_eq!(escape_property("foo").as_deref(), Some("foo"));
        assert_eq!(escape_property("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape_property("a-b.c/d").as_deref(), Some("a__dash__b__dot__c__slash__d"));
        assert_eq!(escape_property("__x").as_deref(), Some("__underscores__x"));
        assert_eq!(escape_property("1abc"), None);
        assert_eq!(escape_property(""), None);
    }

    #[test]
    fn analysis_finds_unsupported_functions_and_variables() {
        assert!(compile("self.x.all(t, t > 0) && has(self.y)").is_ok());
        assert!(compile("self.a.exists_one(x, x == 1) && self.m.filter(k, k != 'a').size() > 0").is_ok());
        assert!(compile("optional.of(1).hasValue() && optional.none().orValue(2) == 2").is_ok());
        assert!(compile("self.?a.orValue(1) == 1").is_ok());
        let e = compile("quantity(self.q).isGreaterThan(quantity('1'))").err().unwrap_or_default();
        assert!(e.contains("isGreaterThan") && e.contains("quantity"), "{e}");
        let e = compile("foo == 1").err().unwrap_or_default();
        assert!(e.contains("unknown variable(s): foo"), "{e}");
        assert!(compile("self.x ==").err().unwrap_or_default().contains("does not compile"));
        assert!(compile("oldSelf == self").is_ok_and(|c| c.uses_old_self));
        assert!(compile("self == 1").is_ok_and(|c| !c.uses_old_self));
    }

    /// Every supported function, exercised, so the allowlist cannot drift from the crate.
    #[test]
    fn every_supported_function_evaluates() {
        let ev = Evaluator::new();
        let cases = [
            "1 + 2 - 1 == 2 && 2 * 3 / 2 == 3 && 7 % 4 == 3 && -1 < 0 && !(1 >= 2)",
            "1 != 2 && 1 <= 1 && 2 > 1 && (true || false) && (true ? 1 : 2) == 1",
            "[1, 2][1] == 2 && 2 in [1, 2] && {'a': 1}.?a.orValue(0) == 1",
            "size('ab') == 2 && 'ab'.size() == 2 && int('3') == 3 && uint(3) == 3u",
            "double(1) == 1.0 && string(1) == '1' && bool('true') && bytes('a') == b'a'",
            "type(1) == int && dyn(1) == 1 && 'abc'.contains('b') && 'abc'.startsWith('a')",
            "'abc'.endsWith('c') && 'abc'.matches('^a.c$') && matches('abc', 'b')",
            "'abc'.charAt(1) == 'b' && 'abc'.indexOf('c') == 2 && 'abca'.lastIndexOf('a') == 3",
            "'Ab'.lowerAscii() == 'ab' && 'ab'.upperAscii() == 'AB' && 'aa'.replace('a', 'b') == 'bb'",
            "'a,b'.split(',') == ['a', 'b'] && 'abc'.substring(1) == 'bc' && ' a '.trim() == 'a'",
            "['a', 'b'].join('-') == 'a-b'",
            "optional.of(1).hasValue() && optional.of(1).value() == 1 && optional.none().or(optional.of(2)).value() == 2",
            "optional.ofNonZeroValue(0).orValue(5) == 5 && [1, 2][?0].orValue(0) == 1",
            "[1, 2, 3].sum() == 6 && [1.5, 1.5].sum() == 3.0 && [3, 1, 2].min() == 1 && [3, 1, 2].max() == 3",
            "[1, 2, 2].isSorted() && ![2, 1].isSorted() && [].sum() == 0",
            "'abc123def456'.find('[0-9]+') == '123' && 'abc123def456'.findAll('[0-9]+') == ['123', '456']",
            "[1, 2].all(x, x > 0) && [1, 2].exists(x, x == 2) && [1, 2].exists_one(x, x == 2)",
            "[1, 2].map(x, x * 2) == [2, 4] && [1, 2].filter(x, x > 1) == [2] && has({'a': 1}.a)",
        ];
        for src in cases {
            let compiled = compile(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            let ctx = ev.root.new_inner_scope();
            let out = compiled.program.execute(&ctx);
            assert_eq!(out, Ok(CelValue::Bool(true)), "{src}");
        }
    }

    #[test]
    fn field_paths() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b.c": {"type": "string"}}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}}}});
        assert_eq!(parse_field_path(".a['b.c']", &schema), Ok(vec![Seg::Field("a".into()), Seg::Field("b.c".into())]));
        assert_eq!(parse_field_path(".m.k", &schema), Ok(vec![Seg::Field("m".into()), Seg::Key("k".into())]));
        assert!(parse_field_path(".nope", &schema).is_err());
        assert!(parse_field_path("a", &schema).is_err());
        assert!(parse_field_path(".a[", &schema).is_err());
        assert_eq!(parse_field_path("", &schema), Ok(vec![]));
    }
}
