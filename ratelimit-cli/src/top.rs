//! `ratelimit top`: the identities of a site with the most refusals, once or as a live
//! table (`--watch`) redrawn every second and on every resize, until `q`, `Esc` or Ctrl-C.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, SystemTime};

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, terminal};
use redis_ratelimit::{BackendError, Limiter};
use serde_json::json;

/// What `ratelimit top` reads.
pub struct Top<'a> {
    pub limiter: &'a Limiter,
    pub prefix: &'a str,
    pub site: &'a str,
    pub since: Duration,
    pub n: usize,
}

impl Top<'_> {
    async fn read(&self) -> Result<Vec<(String, u64)>, BackendError> {
        self.limiter
            .most_limited_in(self.prefix, self.site, self.since, self.n)
            .await
    }

    /// Prints the table (or one JSON document) once.
    pub async fn once(&self, json: bool) -> Result<(), BackendError> {
        let top = self.read().await?;
        if json {
            let identities: Vec<_> = top
                .iter()
                .map(|(identity, refusals)| json!({"identity": identity, "refusals": refusals}))
                .collect();
            let document = json!({
                "site": self.site,
                "since_secs": self.minutes() * 60,
                "identities": identities,
            });
            println!("{document}");
        } else {
            print!("{}", self.frame(&Ok(top), None));
        }
        Ok(())
    }

    /// The whole minutes read.
    fn minutes(&self) -> u64 {
        self.since.as_secs().div_ceil(60).clamp(1, 60)
    }

    /// The text of one table: a heading line, then the identities; `size` (columns, rows)
    /// bounds it on a terminal.
    fn frame(&self, top: &Result<Vec<(String, u64)>, String>, size: Option<(u16, u16)>) -> String {
        let mut heading = format!(
            "most limited at `{}`, last {}m, every instance",
            self.site,
            self.minutes()
        );
        if size.is_some() {
            heading.push_str(&format!(
                " — {} (q to quit)",
                crate::show::utc_now(SystemTime::now())
            ));
        }
        let mut lines = vec![heading];
        match top {
            Err(err) => lines.push(format!("error: {err}")),
            Ok(top) if top.is_empty() => lines.push("no refusals".to_owned()),
            Ok(top) => {
                let rows = top
                    .iter()
                    .enumerate()
                    .map(|(i, (identity, refusals))| {
                        vec![(i + 1).to_string(), identity.clone(), refusals.to_string()]
                    })
                    .collect();
                let table = crate::show::table(&["#", "IDENTITY", "REFUSALS"], rows);
                lines.extend(table.lines().map(str::to_owned));
            }
        }
        if let Some((columns, rows)) = size {
            let (columns, rows) = (usize::from(columns), usize::from(rows).max(1));
            if lines.len() > rows {
                lines.truncate(rows.saturating_sub(1));
                lines.push("…".to_owned());
            }
            for line in &mut lines {
                if line.chars().count() > columns {
                    *line = line.chars().take(columns.saturating_sub(1)).collect();
                    line.push('…');
                }
            }
        }
        let mut out = lines.join("\n");
        out.push('\n');
        out
    }

    /// Redraws the table every second, and at once on a resize, until `q`, `Esc` or
    /// Ctrl-C; the terminal is given back as it was, however this ends.
    pub async fn watch(&self) -> Result<(), String> {
        if !io::stdout().is_terminal() {
            return Err(
                "--watch draws on a terminal; without one, run `ratelimit top` \
                        (e.g. every second with `watch -n1`)"
                    .to_owned(),
            );
        }
        let _screen = Screen::enter().map_err(|err| format!("the terminal: {err}"))?;
        let (keys, mut input) = tokio::sync::mpsc::unbounded_channel();
        // crossterm reads the terminal by blocking: on a thread of its own, which ends with
        // the process.
        std::thread::spawn(move || {
            while let Ok(event) = event::read() {
                if keys.send(event).is_err() {
                    break;
                }
            }
        });
        let mut top = self.read().await.map_err(|err| err.to_string());
        let mut next = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            let size = terminal::size().ok();
            draw(&self.frame(&top, size)).map_err(|err| format!("the terminal: {err}"))?;
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {
                    top = self.read().await.map_err(|err| err.to_string());
                    next = tokio::time::Instant::now() + Duration::from_secs(1);
                }
                event = input.recv() => match event {
                    None => return Ok(()),
                    Some(Event::Key(key)) if quits(&key) => return Ok(()),
                    // A resize (or any other event) redraws at once.
                    Some(_) => {}
                },
            }
        }
    }
}

/// Whether `key` asks to quit: `q`, `Esc`, or Ctrl-C (which raw mode delivers as a key).
fn quits(key: &KeyEvent) -> bool {
    key.kind != KeyEventKind::Release
        && match key.code {
            KeyCode::Char('q') | KeyCode::Esc => true,
            KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        }
}

/// Replaces the screen with `frame` (raw mode: each line starts at column 0).
fn draw(frame: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    queue!(
        out,
        cursor::MoveTo(0, 0),
        terminal::Clear(terminal::ClearType::All)
    )?;
    // No line break after the last line: on the terminal's last row it would scroll the
    // heading away.
    for (i, line) in frame.lines().enumerate() {
        if i > 0 {
            write!(out, "\r\n")?;
        }
        write!(out, "{line}")?;
    }
    out.flush()
}

/// The terminal in raw mode on its alternate screen, the cursor hidden; given back on drop.
struct Screen;

impl Screen {
    fn enter() -> io::Result<Screen> {
        terminal::enable_raw_mode()?;
        let screen = Screen;
        execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
        Ok(screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = execute!(io::stdout(), cursor::Show, terminal::LeaveAlternateScreen);
        let _ = terminal::disable_raw_mode();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top(limiter: &Limiter) -> Top<'_> {
        Top {
            limiter,
            prefix: "rate_limit:",
            site: "login",
            since: Duration::from_secs(15 * 60),
            n: 10,
        }
    }

    #[test]
    fn a_frame_is_an_aligned_table_cut_to_the_terminal() {
        let limiter = Limiter::memory();
        let rows = Ok(vec![
            ("custom:mallory".to_owned(), 120),
            ("ip:203.0.113.9".to_owned(), 7),
        ]);
        let text = top(&limiter).frame(&rows, None);
        assert_eq!(
            text,
            "most limited at `login`, last 15m, every instance\n\
             #  IDENTITY        REFUSALS\n\
             1  custom:mallory  120\n\
             2  ip:203.0.113.9  7\n"
        );
        let small = top(&limiter).frame(&rows, Some((20, 3)));
        let lines: Vec<&str> = small.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| l.chars().count() <= 20), "{small}");
        assert_eq!(lines[2], "…");
    }

    #[test]
    fn q_escape_and_ctrl_c_quit() {
        let key = |code, modifiers| KeyEvent::new(code, modifiers);
        assert!(quits(&key(KeyCode::Char('q'), KeyModifiers::NONE)));
        assert!(quits(&key(KeyCode::Esc, KeyModifiers::NONE)));
        assert!(quits(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)));
        assert!(!quits(&key(KeyCode::Char('c'), KeyModifiers::NONE)));
    }
}
