//! Two client hosts for real: two network namespaces, each its own host as ringload counts hosts
//! (its own UTS name), joined by veth pairs to a bridge in a third namespace that holds the
//! server (`ringload serve --virtual`) and `mpirun`. `mpirun` starts one ringload process in
//! each client namespace through an rsh agent that enters the namespace (`ip netns exec`) and
//! names it (`unshare --uts`, `hostname`); Open MPI talks TCP only (`pml ob1`, `btl tcp,self`),
//! over the namespaces' subnet. The run reads what one process reads, the hosts meet at a
//! barrier every step, and a host killed mid-run ends the job in seconds.
//!
//! Needs root, `ip` (iproute2), `unshare` and `mpirun`; without them the tests skip with the
//! reason, unless `RINGLOAD_REQUIRE_NETNS=1` (set by `scripts/test`), where they fail.
//! Built only with the `mpi` feature.
#![cfg(feature = "mpi")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Set to 1 where these tests must run (CI): a machine that cannot run them fails them.
const REQUIRE: &str = "RINGLOAD_REQUIRE_NETNS";
/// The rig's subnet, private to its namespaces: the hub (bridge, server, mpirun) is .1, the
/// client hosts .2 and .3.
const SUBNET: &str = "10.231.1";
/// The client hosts' suffixes: namespace `<prefix>-a` has address .2 and host name `<prefix>-a`.
const HOSTS: [&str; 2] = ["a", "b"];
/// The workload: the virtual flux_small dataset with this many files, read by this many ranks.
const FILES: &str = "8";
const NP: &str = "4";

/// Runs `command` with stdout and stderr into files (no pipe a daemon could hold open),
/// killing it and failing the test if it runs past `limit`.
fn finish(command: &mut Command, limit: Duration, what: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = command
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let status = wait_for(&mut child, limit);
    let (stdout, stderr) = (
        std::fs::read(&out_path).unwrap(),
        std::fs::read(&err_path).unwrap(),
    );
    let Some(status) = status else {
        panic!(
            "{what}: still running after {limit:?}, killed; stderr:\n{}",
            String::from_utf8_lossy(&stderr)
        );
    };
    Output {
        status,
        stdout,
        stderr,
    }
}

/// Waits up to `limit` for `child`; kills and reaps it past that (returns None).
fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `ip ARGS`, within 10 s; the error is the command and what it printed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = finish(Command::new("ip").args(args), Duration::from_secs(10), "ip");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether `tool` is an executable on PATH.
fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(tool)).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
    })
}

/// Why this machine cannot run the tests, if it cannot.
fn missing() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root (network namespaces need CAP_SYS_ADMIN)".into());
    }
    let tools = [
        ("ip", "iproute2"),
        ("unshare", "util-linux"),
        ("hostname", "hostname"),
        ("mpirun", "openmpi-bin"),
    ];
    let absent: Vec<String> = tools
        .iter()
        .filter(|(tool, _)| !on_path(tool))
        .map(|(tool, package)| format!("no `{tool}` ({package})"))
        .collect();
    (!absent.is_empty()).then(|| absent.join(", "))
}

/// The namespaces of one test: the hub (bridge, server, mpirun) and the two client hosts.
/// Dropping it kills every process left in them and deletes them.
#[derive(Debug)]
struct Rig {
    /// Unique to this process and test: `rlnetns-<pid>-<n>`.
    prefix: String,
    /// Created so far, hub first (what Drop deletes).
    namespaces: Vec<String>,
    /// The agent script and the runs' output.
    dir: tempfile::TempDir,
    server: Option<Child>,
    /// The server's URL, on the hub's bridge address.
    url: String,
}

impl Rig {
    /// The rig, or why this machine cannot build one (skips the test, or fails it under
    /// RINGLOAD_REQUIRE_NETNS=1).
    fn start(test: &str) -> Option<Rig> {
        let why = match missing() {
            Some(why) => why,
            None => match Rig::build() {
                Ok(rig) => return Some(rig),
                Err(why) => why,
            },
        };
        if std::env::var(REQUIRE).is_ok_and(|v| v == "1") {
            panic!("{test}: cannot run: {why} ({REQUIRE}=1: this test must not skip here)");
        }
        eprintln!("skipping {test}: {why} (set {REQUIRE}=1 to make this a failure)");
        None
    }

    fn build() -> Result<Rig, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let prefix = format!(
            "rlnetns-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut rig = Rig {
            namespaces: vec![],
            dir: tempfile::tempdir().map_err(|e| format!("no temporary folder: {e}"))?,
            server: None,
            url: String::new(),
            prefix,
        };
        let hub = rig.namespace("hub")?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&[
            "-n",
            &hub,
            "addr",
            "add",
            &format!("{SUBNET}.1/24"),
            "dev",
            "br0",
        ])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for (i, host) in HOSTS.iter().enumerate() {
            let ns = rig.namespace(host)?;
            let veth = format!("v{host}");
            ip(&[
                "-n", &hub, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip(&["-n", &hub, "link", "set", &veth, "master", "br0"])?;
            ip(&["-n", &hub, "link", "set", &veth, "up"])?;
            let addr = format!("{SUBNET}.{}/24", i + 2);
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        rig.write_agent()?;
        rig.start_server()?;
        Ok(rig)
    }

    /// Creates namespace `<prefix>-<suffix>` with its loopback up.
    fn namespace(&mut self, suffix: &str) -> Result<String, String> {
        let name = format!("{}-{suffix}", self.prefix);
        // A namespace of that name is left from an earlier process with this pid: stale.
        let _ = ip(&["netns", "del", &name]);
        ip(&["netns", "add", &name])?;
        self.namespaces.push(name.clone());
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        Ok(name)
    }

    /// The host name (and namespace) of client host `i`.
    fn host(&self, i: usize) -> String {
        format!("{}-{}", self.prefix, HOSTS[i])
    }

    fn address(i: usize) -> String {
        format!("{SUBNET}.{}", i + 2)
    }

    fn agent(&self) -> PathBuf {
        self.dir.path().join("rsh-agent")
    }

    /// The rsh agent mpirun starts each host's daemon with: `agent [OPTIONS] HOST COMMAND...`,
    /// HOST an address of the subnet. It runs COMMAND as ssh would (through a shell), in that
    /// address's namespace, under its own UTS name.
    fn write_agent(&self) -> Result<(), String> {
        let cases: String = (0..HOSTS.len())
            .map(|i| format!("  {}) ns={} ;;\n", Rig::address(i), self.host(i)))
            .collect();
        let script = format!(
            "#!/bin/sh\n\
             # The rsh agent of tests/mpi_netns.rs: enters the host's network namespace and names it.\n\
             while [ \"${{1#-}}\" != \"$1\" ]; do shift; done\n\
             host=$1; shift\n\
             case $host in\n{cases}  *) echo \"rsh-agent: no namespace for host '$host'\" >&2; exit 1 ;;\nesac\n\
             exec ip netns exec \"$ns\" unshare --uts sh -c 'hostname \"$0\" && exec sh -c \"$1\"' \"$ns\" \"$*\"\n"
        );
        let path = self.agent();
        std::fs::write(&path, script).map_err(|e| format!("cannot write the agent: {e}"))?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| format!("cannot make the agent executable: {e}"))
    }

    /// `ringload serve` of the virtual dataset in the hub, on its bridge address.
    fn start_server(&mut self) -> Result<(), String> {
        let out = self.dir.path().join("server.out");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.namespaces[0]])
            .arg(env!("CARGO_BIN_EXE_ringload"))
            .args([
                "serve",
                "--virtual",
                "flux_small",
                "--files",
                FILES,
                "--bucket",
                "ringload",
            ])
            .args(["--threads", "2", "--listen", &format!("{SUBNET}.1:0")])
            .stdin(Stdio::null())
            .stdout(File::create(&out).map_err(|e| e.to_string())?)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start ringload serve: {e}"))?;
        self.server = Some(child);
        // Its first stdout line is its URL, once it listens.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if let Some(line) = text.lines().next().filter(|_| text.contains('\n')) {
                self.url = line.trim().to_string();
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err("ringload serve printed no URL within 15 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `ringload ARGS` in client host 0's namespace (one process, no MPI).
    fn ringload_on_host(&self, args: &[&str]) -> Command {
        let command = common::ringload();
        let program = command.get_program().to_owned();
        let mut wrapped = Command::new("ip");
        wrapped
            .args(["netns", "exec", &self.host(0)])
            .arg(program)
            .args(args);
        for (name, value) in command.get_envs() {
            match value {
                Some(value) => wrapped.env(name, value),
                None => wrapped.env_remove(name),
            };
        }
        wrapped
    }

    /// `mpirun`, in the hub, of one ringload process per client host: process `i` on host `i`
    /// with `run_args` and then `per_host[i]`.
    fn mpirun(&self, run_args: &[&str], per_host: [&[&str]; 2]) -> Command {
        let mut command = Command::new("ip");
        let net = format!("{SUBNET}.0/24");
        let hosts = format!("{},{}", Rig::address(0), Rig::address(1));
        let agent = self.agent().display().to_string();
        command
            .args(["netns", "exec", &self.namespaces[0], "mpirun"])
            .args(["--allow-run-as-root", "--host", &hosts])
            .args(["--mca", "plm_rsh_agent", &agent])
            .args(["--mca", "plm_rsh_no_tree_spawn", "1"])
            .args(["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"])
            .args(["--mca", "btl_tcp_if_include", &net])
            .args(["--mca", "oob_tcp_if_include", &net]);
        for (i, extra) in per_host.iter().enumerate() {
            if i > 0 {
                command.arg(":");
            }
            command
                .args(["-np", "1", env!("CARGO_BIN_EXE_ringload")])
                .args(run_args)
                .args(*extra);
        }
        let plain = common::ringload();
        for (name, value) in plain.get_envs() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        command
    }

    /// `run flux_small` against the rig's server, writing into `out`.
    fn run_args<'a>(&'a self, out: &'a str) -> Vec<&'a str> {
        vec![
            "run",
            "flux_small",
            "--files",
            FILES,
            "--np",
            NP,
            "--endpoint",
            &self.url,
            "--bucket",
            "ringload",
            "--output",
            out,
        ]
    }

    /// The pids of ringload processes in client host `i`'s namespace.
    fn ringloads_on(&self, i: usize) -> Vec<i32> {
        let out = finish(
            Command::new("ip").args(["netns", "pids", &self.host(i)]),
            Duration::from_secs(10),
            "ip netns pids",
        );
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/exe"))
                    .is_ok_and(|exe| exe.file_name().is_some_and(|n| n == "ringload"))
            })
            .collect()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        // Every process left in the namespaces (mpirun, the daemons, ringload) was started here.
        for ns in &self.namespaces {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Some(pid) = pid.parse().ok().and_then(rustix::process::Pid::from_raw) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                }
            }
        }
        for ns in self.namespaces.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// requests.csv's rows, without the timings: (rank, epoch, reader, get, key, offset, len).
fn gets(dir: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(dir.join("requests.csv")).unwrap();
    let mut rows: Vec<Vec<String>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').take(7).map(str::to_string).collect())
        .collect();
    rows.sort();
    rows
}

/// steps.csv's rows: (rank, epoch, step, barrier_ms).
fn steps(dir: &Path) -> Vec<(usize, usize, usize, f64)> {
    let text = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[5].parse().unwrap(),
            )
        })
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn two_namespace_hosts_read_what_one_process_reads_in_lockstep() {
    let Some(rig) = Rig::start("two_namespace_hosts_read_what_one_process_reads_in_lockstep")
    else {
        return;
    };
    let single = rig.dir.path().join("single");
    let many = rig.dir.path().join("mpi");
    let (single_s, many_s) = (single.display().to_string(), many.display().to_string());
    let out = finish(
        rig.ringload_on_host(&rig.run_args(&single_s))
            .args(["--computation-time", "0.01"]),
        Duration::from_secs(60),
        "one process",
    );
    let code = out.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "one process: {}", text(&out.stderr));
    // Host b computes 60 ms a step, host a 10 ms: a's ranks wait for b's at every step's
    // barrier, which only the hosts' MPI barrier can make them do.
    let out = finish(
        &mut rig.mpirun(
            &rig.run_args(&many_s),
            [
                &["--computation-time", "0.01"],
                &["--computation-time", "0.06"],
            ],
        ),
        Duration::from_secs(60),
        "mpirun",
    );
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "mpirun across the namespaces: exit {code}\n{}",
        text(&out.stderr)
    );
    let (one, all) = (summary(&single), summary(&many));
    assert_eq!(all["num_hosts"], 2, "each namespace is a host");
    let hosts = all["hosts"].as_array().unwrap();
    let names: Vec<&str> = hosts.iter().map(|h| h["host"].as_str().unwrap()).collect();
    assert_eq!(names, [rig.host(0), rig.host(1)], "process i on host i");
    let split: Vec<Vec<u64>> = hosts
        .iter()
        .map(|h| {
            h["ranks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_u64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(split, [vec![0, 1], vec![2, 3]]);
    assert_eq!(all["np"], one["np"]);
    assert_eq!(all["bytes_read"], one["bytes_read"]);
    assert_eq!(all["bytes_read"], all["bytes_planned"]);
    assert_eq!(all["requests"], one["requests"]);
    assert_eq!(gets(&many), gets(&single), "the same GETs as one process");
    for (i, host) in hosts.iter().enumerate() {
        assert!(
            host["bytes_read"].as_u64().unwrap() > 0,
            "host {i} read nothing"
        );
    }
    // The barrier per step: both hosts record every step one process records, and host a's
    // ranks wait there for host b's slower compute on each one.
    let (one_steps, all_steps) = (steps(&single), steps(&many));
    let keys = |rows: &[(usize, usize, usize, f64)]| {
        let mut k: Vec<(usize, usize, usize)> = rows.iter().map(|r| (r.0, r.1, r.2)).collect();
        k.sort_unstable();
        k
    };
    assert_eq!(keys(&all_steps), keys(&one_steps), "the same steps");
    assert!(
        all_steps.len() >= 8,
        "too few steps to show lockstep: {}",
        all_steps.len()
    );
    let waits_a: Vec<f64> = all_steps.iter().filter(|r| r.0 < 2).map(|r| r.3).collect();
    let short: Vec<&f64> = waits_a.iter().filter(|&&ms| ms < 30.0).collect();
    assert!(
        short.is_empty(),
        "host a's ranks passed a step's barrier without waiting for host b (60 - 10 ms): \
         {short:?} of {waits_a:?}"
    );
}

#[test]
fn a_host_killed_mid_run_ends_the_job_within_seconds() {
    let Some(rig) = Rig::start("a_host_killed_mid_run_ends_the_job_within_seconds") else {
        return;
    };
    let out_dir = rig.dir.path().join("killed");
    let out_s = out_dir.display().to_string();
    let (stdout, stderr) = (rig.dir.path().join("stdout"), rig.dir.path().join("stderr"));
    let long: &[&str] = &["--computation-time", "0.05", "train.epochs=100"];
    let mut job = rig
        .mpirun(&rig.run_args(&out_s), [long, long])
        .stdin(Stdio::null())
        .stdout(File::create(&stdout).unwrap())
        .stderr(File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    // Both hosts running ringload, and stepping for a while.
    let deadline = Instant::now() + Duration::from_secs(20);
    let victim = loop {
        let (a, b) = (rig.ringloads_on(0), rig.ringloads_on(1));
        if !a.is_empty() && !b.is_empty() {
            break b[0];
        }
        if Instant::now() >= deadline || job.try_wait().unwrap().is_some() {
            let _ = job.kill();
            let _ = job.wait();
            panic!(
                "ringload did not start on both hosts: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        job.try_wait().unwrap().is_none(),
        "the job ended before the kill"
    );
    let killed = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(victim).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let status = wait_for(&mut job, Duration::from_secs(20));
    let took = killed.elapsed();
    let stderr = std::fs::read_to_string(&stderr).unwrap_or_default();
    let status =
        status.unwrap_or_else(|| panic!("the job hung after a host was killed:\n{stderr}"));
    assert!(!status.success(), "{stderr}");
    assert!(
        took < Duration::from_secs(15),
        "the job took {took:?} to end"
    );
    // mpirun's line: "process rank 1 with PID … on node 10.231.1.3 exited on signal 9".
    let node = format!("on node {}", Rig::address(1));
    assert!(
        stderr.lines().any(|l| l.contains("process rank 1")
            && l.contains(&node)
            && l.contains("exited on signal 9")),
        "no line names the killed host's process:\n{stderr}"
    );
    // No ringload is left on the other host waiting at a barrier.
    let gone = Instant::now() + Duration::from_secs(10);
    while !rig.ringloads_on(0).is_empty() {
        assert!(Instant::now() < gone, "host a's ringload is still running");
        std::thread::sleep(Duration::from_millis(100));
    }
}
