//! The parent: starts the processes, tells them what to do, reads their
//! answers.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use echo_cache::{Health, RawId, Source};
use tokio::sync::mpsc;

use crate::moves::{self, Failure};

use super::{DB, L2, NODE, Program, REPLY, REPLY_BOUND};

/// The processes of move 4; each is ended when this is dropped.
pub(super) struct Fleet {
    processes: Vec<Process>,
}

struct Process {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: mpsc::UnboundedReceiver<String>,
}

impl Fleet {
    /// Starts `nodes` processes of `program` over `l2` and `db`; returns
    /// once each is ready.
    pub async fn start(
        program: &Program,
        nodes: usize,
        l2: &str,
        db: &Path,
    ) -> Result<Fleet, Failure> {
        let mut fleet = Fleet {
            processes: Vec::new(),
        };
        for n in 1..=nodes {
            let mut child = Command::new(&program.exe)
                .args(&program.args)
                .env(NODE, n.to_string())
                .env(L2, l2)
                .env(DB, db)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|err| format!("cannot start process {n}: {err}"))?;
            let stdout = child.stdout.take().expect("piped");
            let (replies, receiver) = mpsc::unbounded_channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(answer) = line.strip_prefix(REPLY) {
                        let _ = replies.send(answer.to_owned());
                    }
                }
            });
            fleet.processes.push(Process {
                stdin: child.stdin.take(),
                child,
                replies: receiver,
            });
        }
        for n in 0..nodes {
            let ready = fleet.reply(n).await?;
            if ready != "ready" {
                return Err(format!("process {}: {ready}", n + 1).into());
            }
        }
        Ok(fleet)
    }

    /// How many processes.
    pub fn len(&self) -> usize {
        self.processes.len()
    }

    /// Their process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(|p| p.child.id()).collect()
    }

    /// Sends `command` to process `n` (from 0).
    fn send(&mut self, n: usize, command: &str) -> Result<(), Failure> {
        let stdin = self.processes[n]
            .stdin
            .as_mut()
            .expect("open until dropped");
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .map_err(|err| format!("process {}: {err}", n + 1))?;
        Ok(())
    }

    /// Process `n`'s next answer, within [`REPLY_BOUND`].
    async fn reply(&mut self, n: usize) -> Result<String, Failure> {
        let next = tokio::time::timeout(REPLY_BOUND, self.processes[n].replies.recv());
        match next.await {
            Ok(Some(answer)) if answer.starts_with("error ") => {
                Err(format!("process {}: {answer}", n + 1).into())
            }
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(format!("process {} ended", n + 1).into()),
            Err(_) => {
                Err(format!("process {} did not answer within {REPLY_BOUND:?}", n + 1).into())
            }
        }
    }

    /// Asks process `n` (from 0) `command`; returns its answer.
    pub(super) async fn ask(&mut self, n: usize, command: &str) -> Result<String, Failure> {
        self.send(n, command)?;
        self.reply(n).await
    }

    /// Asks `command` of each process in `which` at once: every command is
    /// sent before any answer is read. Returns the answers in order.
    pub(super) async fn ask_each(
        &mut self,
        which: std::ops::Range<usize>,
        command: &str,
    ) -> Result<Vec<String>, Failure> {
        for n in which.clone() {
            self.send(n, command)?;
        }
        let mut answers = Vec::new();
        for n in which {
            answers.push(self.reply(n).await?);
        }
        Ok(answers)
    }
}

impl Drop for Fleet {
    /// Closes each process's stdin, which ends it; one that has not ended
    /// within a few seconds is killed.
    fn drop(&mut self) {
        for process in &mut self.processes {
            process.stdin = None;
        }
        let started = Instant::now();
        for process in &mut self.processes {
            while matches!(process.child.try_wait(), Ok(None)) {
                if started.elapsed() > Duration::from_secs(5) {
                    let _ = process.child.kill();
                    let _ = process.child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// A field of an answer: `name=value`.
pub(super) fn field<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer
        .split(' ')
        .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
}

pub(super) fn number(answer: &str, name: &str) -> u64 {
    field(answer, name)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub(super) fn version(answer: &str, name: &str) -> Result<RawId, Failure> {
    let version = field(answer, name).ok_or(format!("no {name} in {answer:?}"))?;
    Ok(version.parse()?)
}

/// How long after the writer's call (`sent_us` of its answer) a process's
/// listener was told (`at_us`).
pub(super) fn delivered(answer: &str, sent: &str) -> Option<Duration> {
    let (at, sent) = (field(answer, "at_us")?, field(sent, "sent_us")?);
    let (at, sent): (u64, u64) = (at.parse().ok()?, sent.parse().ok()?);
    Some(Duration::from_micros(at.saturating_sub(sent)))
}

/// How long a process took to refuse a session (`after_us`).
pub(super) fn after(answer: &str) -> Option<Duration> {
    field(answer, "after_us")?
        .parse()
        .ok()
        .map(Duration::from_micros)
}

pub(super) fn source(answer: &str) -> &'static str {
    match field(answer, "source") {
        Some("Hit") => moves::source_name(Source::Hit),
        Some("L2") => moves::source_name(Source::L2),
        Some("Fill") => moves::source_name(Source::Fill),
        Some("Stale") => moves::source_name(Source::Stale),
        _ => "served",
    }
}

pub(super) fn health(answer: &str) -> Health {
    match field(answer, "health") {
        Some("Serving") => Health::Serving,
        Some("Full") => Health::Full,
        Some("L2Down") => Health::L2Down,
        Some("Bypassing") => Health::Bypassing,
        _ => Health::Unverified,
    }
}
