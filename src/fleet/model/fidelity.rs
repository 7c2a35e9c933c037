//! The model's Redis against a real `redis-server`: the same scripts, from the same
//! states, must answer the same and leave the same data set — so that what the model
//! proves of the scripts holds of them in Redis.
//!
//! Random steps (a fixed seed each run, printed on failure): some write a state
//! directly on both sides (a member's record alive or lapsed, a claim with any owner,
//! epoch, generation, not-before or release, a generation, a server, a fence); the
//! others run a membership or ownership script with random arguments. After each step
//! the answers and every key are compared; Redis' clock runs on between the two runs, so
//! a number of 100 or more may differ by [`CLOCK_SLACK`] ms.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::redis::{Data, Scripts, Val};
use super::Dice;

/// How far apart the two runs' clocks may read.
const CLOCK_SLACK: i64 = 250;

/// A `redis-server` of this test's own, on loopback.
struct RealRedis {
    /// The server.
    child: Child,
    /// A connection to it.
    conn: redis::Connection,
}

impl RealRedis {
    /// Starts one on a free port; panics when `redis-server` cannot run.
    fn start() -> RealRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/deps.sh installs it)");
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client");
        let deadline = Instant::now() + Duration::from_secs(10);
        let conn = loop {
            match client.get_connection() {
                Ok(conn) => break conn,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("redis-server did not answer: {e}"),
            }
        };
        RealRedis { child, conn }
    }

    /// Runs `cmd`, whose answer must come.
    fn cmd<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> T {
        cmd.query(&mut self.conn).expect("redis command")
    }

    /// Redis' clock now, in ms.
    fn now_ms(&mut self) -> i64 {
        let (secs, micros): (i64, i64) = self.cmd(&redis::cmd("TIME"));
        secs * 1000 + micros / 1000
    }

    /// Every key, as the model holds a data set.
    fn data(&mut self) -> Data {
        let keys: Vec<String> = self.cmd(redis::cmd("KEYS").arg("*"));
        let mut data = Data::new();
        for key in keys {
            let kind: String = self.cmd(redis::cmd("TYPE").arg(&key));
            let value = if kind == "hash" {
                Val::Hash(self.cmd(redis::cmd("HGETALL").arg(&key)))
            } else {
                Val::Str(self.cmd(redis::cmd("GET").arg(&key)))
            };
            data.insert(key, value);
        }
        data
    }
}

impl Drop for RealRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One step: a direct write (`None` script) or a script call.
struct Operation {
    /// The script, or `None` for a direct write.
    script: Option<&'static str>,
    /// A direct write's command words, or the script's keys.
    keys: Vec<String>,
    /// The script's arguments.
    args: Vec<String>,
}

/// The keys the scripts use.
const MEMBERS: &str = "{robotsgate}:members";
/// The claim of the one key the steps use.
const CLAIM: &str = "{robotsgate}:own:k";
/// The membership's other keys.
const KEYS5: [&str; 5] = [
    MEMBERS,
    "{robotsgate}:epoch",
    "{robotsgate}:generation",
    "{robotsgate}:server",
    "{robotsgate}:fence",
];

/// A random step at `now`, with `run_id` the real server's: mostly a coherent world
/// (one generation, made on this server; members alive), so that every branch of every
/// script is reached, and now and then anything.
fn step(dice: &mut Dice, now: i64, run_id: &str) -> Operation {
    let id = dice.pick(&["a", "b", "c"]).to_string();
    let epoch = dice.pick(&["1", "2", "1", "2", "3", "0"]).to_string();
    let generation = dice.pick(&["g1", "g1", "g1", "g2"]).to_string();
    let time = |d: &mut Dice| (now + [-5000, -1, 3000, 6000, 6000][d.below(5)]).to_string();
    let write = |words: Vec<&str>| Operation {
        script: None,
        keys: words.iter().map(|w| w.to_string()).collect(),
        args: Vec::new(),
    };
    let script = |name, keys: &[&str], args: Vec<String>| Operation {
        script: Some(name),
        keys: keys.iter().map(|k| k.to_string()).collect(),
        args,
    };
    match dice.below(14) {
        0 | 1 => {
            let state = dice.pick(&["up", "up", "leaving"]);
            let expires = time(dice);
            let record = format!("{epoch}|{expires}|{state}|peer-{id}|2000|1000");
            write(vec!["HSET", MEMBERS, &id, &record])
        }
        2 => {
            let field = dice.pick(&["m", "e", "gen", "n", "nb", "pv", "released", "f:*"]);
            let facts = format!("{now}|0|0");
            let t = time(dice);
            let value = match field {
                "m" => id.as_str(),
                "e" | "n" | "pv" => epoch.as_str(),
                "gen" => generation.as_str(),
                "nb" | "released" => t.as_str(),
                _ => facts.as_str(),
            };
            write(vec!["HSET", CLAIM, field, value])
        }
        3 => match dice.below(4) {
            0 if dice.below(8) == 0 => write(vec!["DEL", "{robotsgate}:generation"]),
            0 => write(vec!["SET", "{robotsgate}:generation", &generation]),
            1 => write(vec!["SET", "{robotsgate}:fence", &time(dice)]),
            2 => write(vec![
                "SET",
                "{robotsgate}:server",
                dice.pick(&[run_id, run_id, "x"]),
            ]),
            _ => write(vec!["DEL", CLAIM]),
        },
        4 | 5 => {
            let state = dice.pick(&["up", "up", "leaving"]).to_string();
            let offer = generation.clone();
            let seen = dice.pick(&["", "g1", "g2"]).to_string();
            let running = dice.pick(&["0", "2500"]).to_string();
            let mode = dice.pick(&["settle", "fence"]).to_string();
            let lease = (
                id,
                epoch,
                "2000".to_string(),
                "peer".to_string(),
                offer,
                state,
            );
            let args = vec![lease.0, lease.1, lease.2, lease.3, lease.4, lease.5];
            let args = [args, vec!["1000".into(), seen, running, "700".into(), mode]].concat();
            script("member_renew", &KEYS5, args)
        }
        6..=8 => {
            let mode = dice
                .pick(&["claim", "claim", "reassert", "vouch"])
                .to_string();
            let keys = [CLAIM, MEMBERS, KEYS5[2], KEYS5[4], KEYS5[3]];
            script(
                "own_claim",
                &keys,
                vec![id, epoch, generation, "604800000".into(), mode],
            )
        }
        9 => script("own_look", &[CLAIM, MEMBERS], Vec::new()),
        10 | 11 => {
            let heir = dice.pick(&["", "b"]).to_string();
            let token = dice.pick(&["1", "2"]).to_string();
            let facts = format!("{now}|0|5");
            let args = vec![
                id,
                epoch,
                generation,
                "604800000".into(),
                heir,
                "2".into(),
                token,
            ];
            let args = [args, vec!["*".into(), facts]].concat();
            script("own_release", &[CLAIM, KEYS5[2], KEYS5[3]], args)
        }
        12 => {
            let token = dice.pick(&["1", "2"]).to_string();
            let args = vec![id, epoch, token, "*".into(), format!("{now}|{now}|10")];
            script("own_record", &[CLAIM], args)
        }
        _ => script("member_leave", &[MEMBERS], vec![id, epoch]),
    }
}

/// A reply as the model reads one (integers in decimal, nil as nothing).
fn words(value: &redis::Value) -> Vec<String> {
    match value {
        redis::Value::Array(items) => items.iter().flat_map(words).collect(),
        redis::Value::Nil => Vec::new(),
        redis::Value::Int(i) => vec![i.to_string()],
        other => vec![redis::from_redis_value::<String>(other.clone()).unwrap_or_default()],
    }
}

/// Do two words agree, within the clock's slack for numbers of 100 or more?
fn same_word(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (a.parse::<i64>(), b.parse::<i64>()) {
        (Ok(x), Ok(y)) if x.abs() >= 100 || y.abs() >= 100 => (x - y).abs() <= CLOCK_SLACK,
        _ => false,
    }
}

/// Do two values agree, word by word (`|`-separated)?
fn same(a: &str, b: &str) -> bool {
    let (x, y): (Vec<&str>, Vec<&str>) = (a.split('|').collect(), b.split('|').collect());
    x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| same_word(p, q))
}

/// Do two data sets agree?
fn same_data(a: &Data, b: &Data) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((ka, va), (kb, vb))| {
            ka == kb
                && match (va, vb) {
                    (Val::Str(x), Val::Str(y)) => same(x, y),
                    (Val::Hash(x), Val::Hash(y)) => {
                        x.len() == y.len()
                            && x.iter()
                                .zip(y)
                                .all(|((fx, x), (fy, y))| fx == fy && same(x, y))
                    }
                    _ => false,
                }
        })
}

/// Answers agree, in any order of a hash's pairs after the fixed fields (`own_claim`'s
/// facts, `member_renew`'s members).
fn same_answer(script: &str, a: &[String], b: &[String]) -> bool {
    let fixed = match script {
        "member_renew" => 4,
        "own_claim" => 4,
        _ => a.len(),
    };
    if a.len() != b.len() || a.len() < fixed.min(a.len()) {
        return false;
    }
    let head = |v: &[String]| v[..fixed.min(v.len())].to_vec();
    let tail = |v: &[String]| {
        let mut pairs: Vec<(String, String)> = v[fixed.min(v.len())..]
            .chunks(2)
            .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default()))
            .collect();
        pairs.sort();
        pairs
    };
    head(a).iter().zip(head(b).iter()).all(|(x, y)| same(x, y))
        && tail(a)
            .iter()
            .zip(tail(b).iter())
            .all(|((k, x), (l, y))| k == l && same(x, y))
}

#[test]
fn the_models_redis_answers_and_stores_as_redis_does() {
    let mut real = RealRedis::start();
    let scripts = Scripts::new();
    let info: String = real.cmd(redis::cmd("INFO").arg("server"));
    let run_id = info
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .expect("run_id")
        .trim()
        .to_string();
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for seed in 1..=16u64 {
        let mut dice = Dice(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let _: () = real.cmd(&redis::cmd("FLUSHALL"));
        let mut model = Data::new();
        // A coherent start: generation g1, made on this server.
        for (key, value) in [
            ("{robotsgate}:generation", "g1"),
            ("{robotsgate}:server", &run_id),
        ] {
            let _: () = real.cmd(redis::cmd("SET").arg(key).arg(value));
            let words: Vec<String> = ["SET", key, value].iter().map(|w| w.to_string()).collect();
            super::redis::command_on(&mut model, 0, &run_id, &words);
        }
        for n in 0..200 {
            let now = real.now_ms();
            let step = step(&mut dice, now, &run_id);
            let Some(name) = step.script else {
                let mut cmd = redis::cmd(&step.keys[0]);
                for word in &step.keys[1..] {
                    cmd.arg(word);
                }
                let _: redis::Value = real.cmd(&cmd);
                super::redis::command_on(&mut model, now, &run_id, &step.keys);
                continue;
            };
            let source = crate::fleet::scripts::source(name);
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(&source)
                .arg(step.keys.len())
                .arg(&step.keys)
                .arg(&step.args);
            let theirs = match cmd.query::<redis::Value>(&mut real.conn) {
                Ok(value) => words(&value),
                Err(e) => panic!(
                    "seed {seed} step {n}: {name} {:?} {:?}: {e}",
                    step.keys, step.args
                ),
            };
            let ours = scripts.run(name, &mut model, now, &run_id, &step.keys, &step.args);
            let first = match name {
                "member_renew" => "answered",
                _ => ours.first().map_or("nil", String::as_str),
            };
            let kind = format!("{name} {first}");
            *kinds.entry(kind).or_default() += 1;
            assert!(
                same_answer(name, &ours, &theirs),
                "seed {seed} step {n}: {name} {:?}: model {ours:?}, redis {theirs:?}",
                step.args
            );
            let stored = real.data();
            assert!(
                same_data(&model, &stored),
                "seed {seed} step {n}: {name}: model {model:#?}\nredis {stored:#?}"
            );
        }
    }
    // Every answer of every script was compared at least once.
    let answers = [
        "own_claim taken",
        "own_claim held",
        "own_claim lost",
        "own_claim stale",
        "own_claim unregistered",
        "own_look held",
        "own_look free",
        "own_release 1",
        "own_release 0",
        "own_record 1",
        "own_record 0",
        "member_leave 1",
        "member_leave 0",
    ];
    for answer in answers {
        assert!(
            kinds.contains_key(answer),
            "never compared: {answer} ({kinds:?})"
        );
    }
}
