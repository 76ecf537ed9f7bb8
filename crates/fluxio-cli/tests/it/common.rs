//! Running the binary, the seeded pipelines, and the stores of the tests.

use std::process::{Command, Stdio};
use std::sync::Arc;

use fluxio::store::CheckpointStore;
use fluxio::{
    Context, Pipeline, PostgresStore, RedisStore, SqliteStore, StageResult, pipeline, stage,
};
use fluxio_test_support::TempDir;

/// What one run of the binary printed, and its exit code.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Ran {
    /// Both streams, for messages.
    pub(crate) fn all(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }

    /// Asserts the exit code, showing the output when it differs.
    #[track_caller]
    pub(crate) fn code(self, want: i32) -> Self {
        assert_eq!(self.code, want, "{}", self.all());
        self
    }

    /// Asserts that standard output holds each of `wants`.
    #[track_caller]
    pub(crate) fn shows(&self, wants: &[&str]) {
        for want in wants {
            assert!(
                self.stdout.contains(want),
                "{want:?} missing: {}",
                self.all()
            );
        }
    }

    /// Standard output as JSON.
    #[track_caller]
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.all()))
    }
}

/// Runs `fluxio` with `args`, standard input closed (no terminal), no
/// `FLUXIO_STORE` from the environment. Every output is checked for ANSI
/// escapes (standard output is a pipe here) and for `secret`, and every
/// failure for its one line on standard error (contract rule 23).
pub(crate) fn fluxio(args: &[&str], secret: Option<&str>) -> Ran {
    fluxio_with(args, secret, &[])
}

/// [`fluxio`] with the environment variables `env` set too.
pub(crate) fn fluxio_with(args: &[&str], secret: Option<&str>, env: &[(&str, &str)]) -> Ran {
    let out = Command::new(env!("CARGO_BIN_EXE_fluxio"))
        .args(args)
        .env_remove("FLUXIO_STORE")
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("the fluxio binary runs");
    let ran = Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !ran.stdout.contains('\x1b') && !ran.stderr.contains('\x1b'),
        "colour without a terminal: {}",
        ran.all()
    );
    if let Some(secret) = secret {
        assert!(
            !ran.all().contains(secret),
            "the password was printed: {}",
            ran.all()
        );
    }
    if ran.code != 0 {
        assert_eq!(
            ran.stderr.lines().count(),
            1,
            "{args:?}: a failure is one line on standard error: {}",
            ran.all()
        );
        assert!(
            ran.stderr.starts_with("fluxio: "),
            "{args:?}: {}",
            ran.all()
        );
    }
    ran
}

#[stage]
async fn load(ctx: Context) -> StageResult {
    Ok(ctx.set("total", 10u64)?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    if ctx.get_opt::<bool>("decline").unwrap_or(false) {
        return Err("card declined".into());
    }
    let total: u64 = ctx.get("total")?;
    Ok(ctx.set("charged", total)?)
}

#[stage]
async fn ship(ctx: Context) -> StageResult {
    Ok(ctx.set("shipped", true)?.remove("note"))
}

/// `load`, `charge`, `ship`, named `name`, on `store`.
pub(crate) fn orders(store: &Arc<dyn CheckpointStore>, name: &str) -> Pipeline {
    pipeline![load, charge, ship]
        .name(name)
        .store_arc(Arc::clone(store))
        .build()
        .expect("a valid pipeline")
}

/// The input of the seeded runs: a customer record (a map), a list, and a
/// note that `ship` removes.
pub(crate) fn input(decline: bool) -> Context {
    #[derive(serde::Serialize)]
    struct Customer {
        name: String,
        vip: bool,
    }
    Context::new()
        .set(
            "customer",
            Customer {
                name: "Ada".into(),
                vip: true,
            },
        )
        .and_then(|c| c.set("items", vec!["book", "pen"]))
        .and_then(|c| c.set("note", "leave at the door"))
        .and_then(|c| c.set("decline", decline))
        .expect("input")
}

/// A store the tests seed, and the arguments that point the binary at it.
pub(crate) struct Target {
    pub(crate) store: Arc<dyn CheckpointStore>,
    pub(crate) args: Vec<String>,
    /// Keeps the SQLite file's directory until the test ends.
    _dir: Option<TempDir>,
}

impl Target {
    /// `fluxio` ([`fluxio`]) with `args` on this store.
    pub(crate) fn run(&self, args: &[&str], secret: Option<&str>) -> Ran {
        let args = self.with(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        fluxio(&args, secret)
    }

    /// `args` with the store's arguments before them.
    pub(crate) fn with(&self, args: &[&str]) -> Vec<String> {
        let mut all = self.args.clone();
        all.extend(args.iter().map(|a| (*a).to_owned()));
        all
    }
}

/// A SQLite file in a temporary directory, with a table of the test's own.
pub(crate) async fn sqlite(test: &str) -> Target {
    let dir = TempDir::new(test);
    let path = dir.db("runs");
    let store = SqliteStore::builder(&path)
        .table("cli_runs")
        .connect()
        .await
        .expect("a SQLite store");
    Target {
        store: Arc::new(store),
        args: vec![
            "--store".into(),
            format!("sqlite://{}", path.display()),
            "--table".into(),
            "cli_runs".into(),
        ],
        _dir: Some(dir),
    }
}

/// Redis under the key prefix `prefix`, or `None` (skipped) without a server.
pub(crate) async fn redis(prefix: &str) -> Option<Target> {
    fluxio_test_support::redis::raw().await?;
    let url = fluxio_test_support::redis::url();
    let store = RedisStore::builder(&url)
        .key_prefix(prefix)
        .connect()
        .await
        .expect("a Redis store");
    Some(Target {
        store: Arc::new(store),
        args: vec!["--store".into(), url, "--prefix".into(), prefix.into()],
        _dir: None,
    })
}

/// The store `store` on the namespace `name` (`--schema`: a schema, a
/// database) of the server at `url`.
fn on_server(store: impl CheckpointStore + 'static, url: &str, name: &str) -> Target {
    Target {
        store: Arc::new(store),
        args: vec![
            "--store".into(),
            url.to_owned(),
            "--schema".into(),
            name.into(),
        ],
        _dir: None,
    }
}

/// PostgreSQL in the schema `schema` through `url`, or `None` (skipped)
/// without a server.
pub(crate) async fn postgres(url: &str, schema: &str) -> Target {
    let store = PostgresStore::builder(url).schema(schema).connect().await;
    on_server(store.expect("a Postgres store"), url, schema)
}

/// MySQL or MariaDB in the database `database` through `url`.
pub(crate) async fn mysql(url: &str, database: &str) -> Target {
    let store = fluxio::MySqlStore::builder(url)
        .database(database)
        .connect()
        .await;
    on_server(store.expect("a MySQL store"), url, database)
}

/// `url` with `password` put in its user info (`postgres://u@h` ->
/// `postgres://u:password@h`).
pub(crate) fn with_password(url: &str, password: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((user, host)) => {
                let user = user.split(':').next().unwrap_or(user);
                format!("{scheme}://{user}:{password}@{host}")
            }
            None => format!("{scheme}://postgres:{password}@{rest}"),
        },
        None => url.to_owned(),
    }
}
