//! The model's Redis: the fleet's own Lua scripts (`scripts.rs`'s text, prelude and all)
//! run in Lua 5.1 — the Lua Redis embeds — against a data set held in memory, with the
//! commands those scripts call and Redis' conversions between Lua and replies.
//!
//! Only what the membership and ownership scripts use is here: `TIME` and `INFO` (the
//! model's clock and server), strings (`GET`, `SET`, `INCR`, `DEL`), hashes (`HGET`,
//! `HSET`, `HINCRBY`, `HDEL`, `HGETALL`, `HVALS`) and `PEXPIRE` (a no-op: no record expires within
//! a model's horizon). Any other command is an error that fails the model, as a script
//! error would fail the call in Redis. `fidelity.rs` runs the same scripts on a real
//! `redis-server` and this one and compares what they answer and store.

use std::collections::BTreeMap;

use mlua::{Function, Lua, MultiValue, Value, Variadic};

/// One key's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Val {
    /// A string.
    Str(String),
    /// A hash.
    Hash(BTreeMap<String, String>),
}

/// A data set: what one Redis server holds.
pub type Data = BTreeMap<String, Val>;

/// What a script call runs against: the data set, Redis' clock and the server's id.
struct Call {
    /// The data set, changed in place.
    data: Data,
    /// `TIME`, in milliseconds.
    now_ms: i64,
    /// `INFO server`'s `run_id`.
    run_id: String,
}

/// A change to one script: its name, a text in it, what replaces that text.
pub type Mutation = (&'static str, &'static str, &'static str);

/// The scripts, compiled once in one Lua state.
pub struct Scripts {
    /// The Lua state (its `redis` global is the model's).
    lua: Lua,
    /// Compiled scripts, by name.
    compiled: BTreeMap<&'static str, Function>,
}

/// The membership and ownership scripts the model runs.
pub const NAMES: [&str; 6] = [
    "member_renew",
    "member_leave",
    "own_claim",
    "own_look",
    "own_release",
    "own_record",
];

impl Scripts {
    /// Compiles the scripts.
    pub fn new() -> Scripts {
        Scripts::mutated(None)
    }

    /// Compiles the scripts, one of them changed by `mutation` (a rule removed, to show
    /// the model fails without it): in script `.0`, the text `.1` (which must be there)
    /// replaced by `.2`.
    pub fn mutated(mutation: Option<Mutation>) -> Scripts {
        let lua = Lua::new();
        let redis = lua.create_table().expect("table");
        let call = lua
            .create_function(|lua, args: Variadic<Value>| command(lua, &args))
            .expect("redis.call");
        redis.set("call", call).expect("redis.call");
        lua.globals().set("redis", redis).expect("redis");
        let compiled = NAMES
            .iter()
            .map(|name| {
                let mut source = crate::fleet::scripts::source(name);
                if let Some((script, from, to)) = mutation.filter(|m| m.0 == *name) {
                    assert!(source.contains(from), "{script} has no {from:?} to change");
                    source = source.replace(from, to);
                }
                let function = lua
                    .load(&source)
                    .set_name(*name)
                    .into_function()
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                (*name, function)
            })
            .collect();
        Scripts { lua, compiled }
    }

    /// Runs `name` with `keys` and `args` on `data` at `now_ms` on server `run_id`: its
    /// reply as the redis crate reads a `Vec<String>` (integers in decimal).
    pub fn run(
        &self,
        name: &str,
        data: &mut Data,
        now_ms: i64,
        run_id: &str,
        keys: &[String],
        args: &[String],
    ) -> Vec<String> {
        let function = &self.compiled[name];
        let globals = self.lua.globals();
        globals.set("KEYS", keys.to_vec()).expect("KEYS");
        globals.set("ARGV", args.to_vec()).expect("ARGV");
        self.lua.set_app_data(Call {
            data: std::mem::take(data),
            now_ms,
            run_id: run_id.to_string(),
        });
        let result: mlua::Result<Value> = function.call(());
        let call = self.lua.remove_app_data::<Call>().expect("the call's data");
        *data = call.data;
        let value = result.unwrap_or_else(|e| panic!("{name} {keys:?} {args:?}: {e}"));
        reply(&value)
    }
}

/// Runs one command (`words`) on `data` directly, as a test writes a state.
pub fn command_on(data: &mut Data, now_ms: i64, run_id: &str, words: &[String]) {
    let mut call = Call {
        data: std::mem::take(data),
        now_ms,
        run_id: run_id.to_string(),
    };
    let done = run(&mut call, &words[0].to_ascii_uppercase(), &words[1..]);
    *data = call.data;
    if let Err(e) = done {
        panic!("{words:?}: {e}");
    }
}

/// A script's return value as a reply, read as strings (Redis: a number is an integer,
/// truncated; a table an array up to its first nil; false a nil).
fn reply(value: &Value) -> Vec<String> {
    match value {
        Value::Table(table) => table
            .clone()
            .sequence_values::<Value>()
            .map_while(|v| v.ok())
            .take_while(|v| !matches!(v, Value::Nil | Value::Boolean(false)))
            .map(|v| scalar(&v))
            .collect(),
        Value::Nil | Value::Boolean(false) => Vec::new(),
        other => vec![scalar(other)],
    }
}

/// One reply element as a string.
fn scalar(value: &Value) -> String {
    match value {
        Value::Integer(i) => i.to_string(),
        Value::Number(n) => (n.trunc() as i64).to_string(),
        Value::String(s) => s.to_string_lossy().to_string(),
        Value::Boolean(true) => "1".into(),
        other => panic!("a script returned {other:?}"),
    }
}

/// An argument of `redis.call` as Redis takes it: a string, or a number written out.
fn argument(value: &Value) -> mlua::Result<String> {
    Ok(match value {
        Value::String(s) => s.to_str()?.to_string(),
        Value::Integer(i) => i.to_string(),
        Value::Number(n) if n.fract() == 0.0 && n.abs() < 1e17 => (*n as i64).to_string(),
        Value::Number(n) => n.to_string(),
        other => {
            return Err(mlua::Error::runtime(format!(
                "Lua redis() command arguments must be strings or integers, got {other:?}"
            )))
        }
    })
}

/// One `redis.call`: the command run on the call's data set, its reply in Lua.
fn command(lua: &Lua, args: &[Value]) -> mlua::Result<MultiValue> {
    let words = args
        .iter()
        .map(argument)
        .collect::<mlua::Result<Vec<_>>>()?;
    let (name, rest) = words
        .split_first()
        .ok_or_else(|| mlua::Error::runtime("no command"))?;
    let mut call = lua
        .app_data_mut::<Call>()
        .ok_or_else(|| mlua::Error::runtime("no call"))?;
    let reply = run(&mut call, &name.to_ascii_uppercase(), rest)?;
    drop(call);
    Ok(MultiValue::from_vec(vec![reply.into_lua(lua)?]))
}

/// A reply, before it is a Lua value.
enum Reply {
    /// A bulk string.
    Bulk(String),
    /// A nil bulk (Lua: false).
    Nil,
    /// An integer.
    Int(i64),
    /// An array.
    Array(Vec<Reply>),
    /// `+OK` (Lua: a table with `ok`).
    Ok,
}

impl Reply {
    /// As Redis gives it to a script.
    fn into_lua(self, lua: &Lua) -> mlua::Result<Value> {
        Ok(match self {
            Reply::Bulk(s) => Value::String(lua.create_string(&s)?),
            Reply::Nil => Value::Boolean(false),
            Reply::Int(i) => Value::Integer(i),
            Reply::Array(items) => {
                let table = lua.create_table()?;
                for (i, item) in items.into_iter().enumerate() {
                    table.set(i + 1, item.into_lua(lua)?)?;
                }
                Value::Table(table)
            }
            Reply::Ok => {
                let table = lua.create_table()?;
                table.set("ok", "OK")?;
                Value::Table(table)
            }
        })
    }
}

/// The error a command on a key of the wrong type gets.
fn wrong_type() -> mlua::Error {
    mlua::Error::runtime("WRONGTYPE Operation against a key holding the wrong kind of value")
}

/// The hash at `key` (made when `create`), or the wrong-type error.
fn hash<'a>(
    data: &'a mut Data,
    key: &str,
    create: bool,
) -> mlua::Result<Option<&'a mut BTreeMap<String, String>>> {
    if create && !data.contains_key(key) {
        data.insert(key.to_string(), Val::Hash(BTreeMap::new()));
    }
    match data.get_mut(key) {
        None => Ok(None),
        Some(Val::Hash(h)) => Ok(Some(h)),
        Some(Val::Str(_)) => Err(wrong_type()),
    }
}

/// Runs one command on `call`'s data set.
fn run(call: &mut Call, name: &str, args: &[String]) -> mlua::Result<Reply> {
    let arg = |i: usize| -> mlua::Result<&String> {
        args.get(i)
            .ok_or_else(|| mlua::Error::runtime(format!("{name}: wrong number of arguments")))
    };
    let data = &mut call.data;
    Ok(match name {
        "TIME" => Reply::Array(vec![
            Reply::Bulk((call.now_ms / 1000).to_string()),
            Reply::Bulk(((call.now_ms % 1000) * 1000).to_string()),
        ]),
        "INFO" => Reply::Bulk(format!("# Server\r\nrun_id:{}\r\n", call.run_id)),
        "GET" => match data.get(arg(0)?) {
            None => Reply::Nil,
            Some(Val::Str(s)) => Reply::Bulk(s.clone()),
            Some(Val::Hash(_)) => return Err(wrong_type()),
        },
        "SET" => {
            data.insert(arg(0)?.clone(), Val::Str(arg(1)?.clone()));
            Reply::Ok
        }
        "INCR" => {
            let next = match data.get(arg(0)?) {
                None => 1,
                Some(Val::Str(s)) => {
                    s.parse::<i64>()
                        .map_err(|_| mlua::Error::runtime("ERR value is not an integer"))?
                        + 1
                }
                Some(Val::Hash(_)) => return Err(wrong_type()),
            };
            data.insert(arg(0)?.clone(), Val::Str(next.to_string()));
            Reply::Int(next)
        }
        "DEL" => Reply::Int(args.iter().filter(|k| data.remove(*k).is_some()).count() as i64),
        "PEXPIRE" => Reply::Int(i64::from(data.contains_key(arg(0)?))),
        "HGET" => match hash(data, arg(0)?, false)? {
            Some(h) => h.get(arg(1)?).cloned().map_or(Reply::Nil, Reply::Bulk),
            None => Reply::Nil,
        },
        "HSET" => {
            if args.len() < 3 || args.len() % 2 == 0 {
                return Err(mlua::Error::runtime(
                    "ERR wrong number of arguments for 'hset'",
                ));
            }
            let h = hash(data, arg(0)?, true)?.expect("made");
            let added = args[1..]
                .chunks(2)
                .filter(|pair| h.insert(pair[0].clone(), pair[1].clone()).is_none())
                .count();
            Reply::Int(added as i64)
        }
        "HINCRBY" => {
            let by: i64 = arg(2)?
                .parse()
                .map_err(|_| mlua::Error::runtime("ERR value is not an integer"))?;
            let h = hash(data, arg(0)?, true)?.expect("made");
            let field = h.entry(arg(1)?.clone()).or_insert_with(|| "0".into());
            let next = field
                .parse::<i64>()
                .map_err(|_| mlua::Error::runtime("ERR hash value is not an integer"))?
                + by;
            *field = next.to_string();
            Reply::Int(next)
        }
        "HDEL" => {
            let key = arg(0)?.clone();
            let removed = match hash(data, &key, false)? {
                Some(h) => args[1..].iter().filter(|f| h.remove(*f).is_some()).count(),
                None => 0,
            };
            if matches!(data.get(&key), Some(Val::Hash(h)) if h.is_empty()) {
                data.remove(&key);
            }
            Reply::Int(removed as i64)
        }
        "HGETALL" | "HVALS" => {
            let items = match hash(data, arg(0)?, false)? {
                Some(h) if name == "HGETALL" => h
                    .iter()
                    .flat_map(|(k, v)| [Reply::Bulk(k.clone()), Reply::Bulk(v.clone())])
                    .collect(),
                Some(h) => h.values().map(|v| Reply::Bulk(v.clone())).collect(),
                None => Vec::new(),
            };
            Reply::Array(items)
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "the model's Redis has no {other}"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `words` as owned strings.
    fn owned(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    /// A member that leaves holding a claim it could not release (a failed call, a key
    /// in no state to release): the claim is taken over as a vanished member's, acted on
    /// only after its lease end plus its `after`, never at once and without the facts it kept
    /// (seen in a 30-minute campaign on a Cluster: the next owner's first request came
    /// 141 ms after the leaving member's last answer, under a 0.3 s Crawl-delay).
    #[test]
    fn a_claim_still_held_at_a_leave_is_taken_only_after_its_lease_and_after() {
        let scripts = Scripts::new();
        let mut data = Data::default();
        let membership = owned(&["members", "epoch", "gen", "server", "fence"]);
        let claim = owned(&["claim", "members", "gen", "fence", "server"]);
        let mut run = |name: &str, now: i64, keys: &[String], args: &[&str]| {
            scripts.run(name, &mut data, now, "run", keys, &owned(args))
        };
        // Lease 1 s, after 3 s; a new data set settles at once.
        fn renew<'a>(id: &'a str, epoch: &'a str, peer: &'a str) -> [&'a str; 11] {
            [
                id, epoch, "1000", peer, "g1", "up", "3000", "", "0", "0", "settle",
            ]
        }
        let a = run(
            "member_renew",
            0,
            &membership,
            &renew("a", "0", "127.0.0.1:1"),
        );
        assert_eq!(a[1], "1", "{a:?}");
        let taken = run(
            "own_claim",
            10,
            &claim,
            &["a", "1", "g1", "604800000", "claim"],
        );
        assert_eq!(taken[0], "taken", "{taken:?}");
        let left = run("member_leave", 20, &membership[..1], &["a", "1"]);
        assert_eq!(left, ["1"]);
        let b = run(
            "member_renew",
            30,
            &membership,
            &renew("b", "0", "127.0.0.1:2"),
        );
        let epoch = b[1].clone();
        let asked = run(
            "own_claim",
            40,
            &claim,
            &["b", &epoch, "g1", "604800000", "claim"],
        );
        // a's lease ends at 1000, its exchanges may run 3000 more: b acts from 4000.
        assert_eq!(&asked[..3], ["taken", "taken_over", "3960"], "{asked:?}");
    }
}
