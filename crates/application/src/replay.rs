//! Audit playback: a recorded run's events again, in order, at the pace
//! they were recorded (or `speed` times faster). `awr replay` prints them
//! and `awr serve` streams them (`?replay=SPEED`); both pace them here. A
//! replay only reads the log: nothing is executed again, nothing written.

use std::sync::Arc;
use std::time::Duration;

use domain::Timestamp;

use crate::ports::Clock;

/// The longest wait between two events of a replay, by default: a run that
/// sat paused for a day replays its resume a few seconds later.
pub const MAX_WAIT: Duration = Duration::from_secs(5);

/// When to show each event of a replay: as long after the previous one as
/// it was recorded after it, divided by the speed, and at most `max_wait`.
/// Waits are counted from the first event's showing, not from the end of
/// the previous wait, so a slow reader does not make a replay drift.
#[derive(Clone)]
pub struct Pace {
    clock: Arc<dyn Clock>,
    speed: f64,
    max_wait: Duration,
    /// When the first event was shown, and the last timestamp seen.
    started: Option<(Timestamp, Timestamp)>,
    /// How long after `started` the next event is due.
    due: Duration,
}

impl std::fmt::Debug for Pace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pace")
            .field("speed", &self.speed)
            .field("max_wait", &self.max_wait)
            .field("due", &self.due)
            .finish_non_exhaustive()
    }
}

impl Pace {
    /// `speed` times the recorded pace on `clock` (see [`parse_speed`]);
    /// no wait longer than `max_wait`.
    pub fn new(clock: Arc<dyn Clock>, speed: f64, max_wait: Duration) -> Self {
        Self {
            clock,
            speed,
            max_wait,
            started: None,
            due: Duration::ZERO,
        }
    }

    /// Waits until the event recorded at `at` is due. A timestamp earlier
    /// than the previous one (a clock set back) is due at once, and no
    /// wait is longer than the event's own gap, whatever the clock does.
    pub async fn wait(&mut self, at: Timestamp) {
        let Some((origin, last)) = self.started.as_mut() else {
            self.started = Some((self.clock.now(), at));
            return;
        };
        // A gap too long for a `Duration` at a tiny speed is capped too.
        let gap = Duration::try_from_secs_f64(at.millis_since(*last) as f64 / 1e3 / self.speed)
            .unwrap_or(Duration::MAX)
            .min(self.max_wait);
        *last = at;
        self.due = self.due.saturating_add(gap);
        let elapsed = Duration::from_millis(self.clock.now().millis_since(*origin));
        let wait = self.due.saturating_sub(elapsed).min(gap);
        if !wait.is_zero() {
            self.clock.sleep(wait).await;
        }
    }
}

/// A replay speed: a finite number above 0 (`1` is the recorded pace,
/// `10` ten times faster, `0.5` half as fast).
pub fn parse_speed(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(speed) if speed.is_finite() && speed > 0.0 => Ok(speed),
        _ => Err(format!(
            "`{text}` is not a speed: give a number above 0 (1 is the recorded pace)"
        )),
    }
}

/// A longest wait in seconds: a finite number, 0 or more.
pub fn parse_max_wait(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(secs) if (0.0..1e9).contains(&secs) => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!("`{text}` is not a number of seconds (0 or more)")),
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::testing::TokioClock;

    fn at(millis: i64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + millis)
    }

    fn pace(speed: f64, max_wait: Duration) -> Pace {
        Pace::new(Arc::new(TokioClock::new()), speed, max_wait)
    }

    /// Each event is shown its recorded gap after the previous one,
    /// divided by the speed, capped; a clock set back costs nothing.
    #[tokio::test(start_paused = true)]
    async fn events_are_due_at_their_recorded_gaps_over_the_speed() {
        let mut pace = pace(2.0, Duration::from_secs(3));
        let start = Instant::now();
        let mut shown = Vec::new();
        for millis in [0, 1_000, 1_000, 5_000, 4_000, 60_000] {
            pace.wait(at(millis)).await;
            shown.push(start.elapsed().as_millis());
        }
        // Gaps 1 s, 0, 4 s, back 1 s, 56 s: halved, each at most 3 s.
        assert_eq!(shown, vec![0, 500, 500, 2_500, 2_500, 5_500]);
    }

    /// A reader slower than the replay is not made to wait again: the
    /// schedule is kept from the first event, not from the last wait.
    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_catches_up_instead_of_drifting() {
        let mut pace = pace(1.0, Duration::from_secs(5));
        let start = Instant::now();
        pace.wait(at(0)).await;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        pace.wait(at(1_000)).await;
        assert_eq!(start.elapsed().as_millis(), 1_500, "due already: no wait");
        pace.wait(at(3_000)).await;
        assert_eq!(start.elapsed().as_millis(), 3_000, "back on schedule");
    }

    /// A speed so small that a gap over it is no `Duration` waits the cap.
    #[tokio::test(start_paused = true)]
    async fn a_tiny_speed_waits_the_longest_wait() {
        let mut pace = pace(
            parse_speed("1e-300").expect("a speed"),
            Duration::from_secs(5),
        );
        let start = Instant::now();
        for millis in [0, 1, 2] {
            pace.wait(at(millis)).await;
        }
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[test]
    fn a_speed_is_a_finite_number_above_zero() {
        assert_eq!(parse_speed("2.5"), Ok(2.5));
        for bad in ["0", "-1", "abc", "inf", "NaN", ""] {
            match parse_speed(bad) {
                Err(e) => assert!(e.contains(&format!("`{bad}`")), "{e}"),
                Ok(speed) => panic!("`{bad}` read as {speed}"),
            }
        }
        assert_eq!(parse_max_wait("0"), Ok(Duration::ZERO));
        assert!(parse_max_wait("-0.5").is_err());
        assert!(parse_max_wait("soon").is_err());
    }
}
