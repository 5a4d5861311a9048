//! Label placement for the charts: boxes, line segments and a greedy placer that keeps labels
//! off each other, off the chart's lines and (as far as it can) off its dots. Text boxes come
//! from estimated text widths (`markup::text_width`); the HTML report re-checks the result with
//! the browser's real fonts.

use std::f64::consts::PI;

use super::markup::text_width;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rect {
    pub(crate) x0: f64,
    pub(crate) y0: f64,
    pub(crate) x1: f64,
    pub(crate) y1: f64,
}

impl Rect {
    pub(crate) fn overlap_area(&self, other: &Rect) -> f64 {
        let w = self.x1.min(other.x1) - self.x0.max(other.x0);
        let h = self.y1.min(other.y1) - self.y0.max(other.y0);
        if w > 0.0 && h > 0.0 {
            w * h
        } else {
            0.0
        }
    }

    pub(crate) fn inside(&self, outer: &Rect) -> bool {
        self.x0 >= outer.x0 && self.x1 <= outer.x1 && self.y0 >= outer.y0 && self.y1 <= outer.y1
    }

    pub(crate) fn grow(&self, by: f64) -> Rect {
        Rect {
            x0: self.x0 - by,
            y0: self.y0 - by,
            x1: self.x1 + by,
            y1: self.y1 + by,
        }
    }
}

/// A straight piece of a ceiling, in pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Segment {
    pub(crate) x0: f64,
    pub(crate) y0: f64,
    pub(crate) x1: f64,
    pub(crate) y1: f64,
}

impl Segment {
    /// Whether the segment passes through `rect` (Liang-Barsky clipping).
    pub(crate) fn crosses(&self, rect: &Rect) -> bool {
        let (dx, dy) = (self.x1 - self.x0, self.y1 - self.y0);
        let mut t0: f64 = 0.0;
        let mut t1: f64 = 1.0;
        for (p, q) in [
            (-dx, self.x0 - rect.x0),
            (dx, rect.x1 - self.x0),
            (-dy, self.y0 - rect.y0),
            (dy, rect.y1 - self.y0),
        ] {
            if p == 0.0 {
                if q < 0.0 {
                    return false;
                }
            } else {
                let t = q / p;
                if p < 0.0 {
                    t0 = t0.max(t);
                } else {
                    t1 = t1.min(t);
                }
            }
        }
        t0 <= t1
    }
}

/// Text anchor of a placed label.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    pub(crate) fn svg(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// A label position: the text's anchor point (baseline) and the box it covers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlacedLabel {
    pub(crate) x: f64,
    pub(crate) baseline: f64,
    pub(crate) anchor: Anchor,
    pub(crate) rect: Rect,
}

pub(crate) fn label_rect(x: f64, baseline: f64, anchor: Anchor, width: f64, font_px: f64) -> Rect {
    let x0 = match anchor {
        Anchor::Start => x,
        Anchor::Middle => x - width / 2.0,
        Anchor::End => x - width,
    };
    Rect {
        x0,
        y0: baseline - font_px * 0.82,
        x1: x0 + width,
        y1: baseline + font_px * 0.24,
    }
}

/// Greedy label placement: every label tries candidate positions in order of preference and
/// takes the cheapest one that stays inside the plot and overlaps no label placed before it.
/// Dots are soft obstacles (covering one costs in proportion to the area covered).
pub(crate) struct LabelPlacer {
    pub(crate) bounds: Rect,
    pub(crate) labels: Vec<Rect>,
    pub(crate) dots: Vec<(f64, f64, f64)>,
    /// Ceiling lines: crossing one makes a label hard to read, so it costs.
    pub(crate) lines: Vec<Segment>,
}

impl LabelPlacer {
    pub(crate) fn new(bounds: Rect) -> Self {
        LabelPlacer {
            bounds,
            labels: Vec::new(),
            dots: Vec::new(),
            lines: Vec::new(),
        }
    }

    /// Reserves a region (a ceiling label, a ridge marker) so later labels avoid it.
    pub(crate) fn reserve(&mut self, rect: Rect) {
        self.labels.push(rect);
    }

    pub(crate) fn dot_cost(&self, rect: &Rect, skip: Option<(f64, f64)>) -> f64 {
        self.dots
            .iter()
            .filter(|(x, y, _)| skip != Some((*x, *y)))
            .map(|&(x, y, r)| {
                let square = Rect {
                    x0: x - r,
                    y0: y - r,
                    x1: x + r,
                    y1: y + r,
                };
                rect.overlap_area(&square) * PI / 4.0
            })
            .sum()
    }

    /// The leader line from the edge of `dot` to the nearest point of `rect`.
    pub(crate) fn leader(&self, dot: Option<(f64, f64)>, rect: &Rect) -> Option<Segment> {
        let (cx, cy) = dot?;
        let radius = self
            .dots
            .iter()
            .find(|(x, y, _)| (*x, *y) == (cx, cy))
            .map(|(_, _, r)| *r)
            .unwrap_or(0.0);
        let (tx, ty) = (cx.clamp(rect.x0, rect.x1), cy.clamp(rect.y0, rect.y1));
        let length = ((tx - cx).powi(2) + (ty - cy).powi(2)).sqrt();
        if length <= radius {
            return None;
        }
        Some(Segment {
            x0: cx + (tx - cx) / length * radius,
            y0: cy + (ty - cy) / length * radius,
            x1: tx,
            y1: ty,
        })
    }

    /// Picks the best candidate (each with a preference penalty); `None` when every candidate
    /// leaves the plot or overlaps a placed label.
    pub(crate) fn place(
        &mut self,
        candidates: &[(PlacedLabel, f64)],
        own_dot: Option<(f64, f64)>,
        dot_weight: f64,
    ) -> Option<PlacedLabel> {
        let mut best: Option<(f64, PlacedLabel)> = None;
        for &(label, penalty) in candidates {
            if !label.rect.inside(&self.bounds) {
                continue;
            }
            let padded = label.rect.grow(2.0);
            if self
                .labels
                .iter()
                .any(|placed| placed.overlap_area(&padded) > 0.0)
            {
                continue;
            }
            let crossings = self
                .lines
                .iter()
                .filter(|line| line.crosses(&label.rect))
                .count();
            // A leader line from the dot to the label should not run through other labels.
            let leader_crossings = self
                .leader(own_dot, &label.rect)
                .map(|leader| {
                    self.labels
                        .iter()
                        .filter(|placed| leader.crosses(placed))
                        .count()
                })
                .unwrap_or(0);
            let cost = penalty
                + self.dot_cost(&label.rect, own_dot) * dot_weight
                + crossings as f64 * LINE_CROSSING_COST
                + leader_crossings as f64 * LEADER_THROUGH_LABEL_COST;
            if best.as_ref().is_none_or(|(c, _)| cost < *c) {
                best = Some((cost, label));
            }
        }
        let (_, label) = best?;
        self.labels.push(label.rect);
        // Later labels keep off this label's leader line.
        if let Some(leader) = self.leader(own_dot, &label.rect) {
            self.lines.push(leader);
        }
        Some(label)
    }
}

/// What crossing a ceiling line costs a label, in the units of the candidates' penalties (one
/// ring further out costs 40, so a label rather moves several rings out with a leader line).
pub(crate) const LINE_CROSSING_COST: f64 = 300.0;
/// What a leader line through another label costs: worse than any free spot further out.
pub(crate) const LEADER_THROUGH_LABEL_COST: f64 = 2000.0;

/// Candidate positions around a dot at increasing distances: eight directions close to the
/// dot, sixteen further out (where a leader line ties the label to its dot).
pub(crate) fn candidates_around(
    cx: f64,
    cy: f64,
    radius: f64,
    width: f64,
    font_px: f64,
) -> Vec<(PlacedLabel, f64)> {
    let mut out = Vec::new();
    let gaps = [4.0, 16.0, 32.0, 52.0, 80.0, 115.0, 160.0, 210.0, 270.0];
    for (ring, gap) in gaps.iter().enumerate() {
        let d = radius + gap;
        let directions = if ring < 2 { 8 } else { 16 };
        for step in 0..directions {
            // Start to the right and alternate above/below, so the preferred sides come first.
            let turn = (step + 1) / 2;
            let sign = if step % 2 == 0 { 1.0 } else { -1.0 };
            let angle = sign * turn as f64 * 2.0 * PI / directions as f64;
            let (dx, dy) = (angle.cos(), angle.sin());
            let anchor = if dx > 0.3 {
                Anchor::Start
            } else if dx < -0.3 {
                Anchor::End
            } else {
                Anchor::Middle
            };
            // The label's box touches the point on the ring from outside.
            let baseline = if dy > 0.3 {
                cy + d * dy + font_px * 0.82
            } else if dy < -0.3 {
                cy + d * dy - font_px * 0.24
            } else {
                cy + d * dy + font_px * 0.3
            };
            let x = cx + d * dx;
            let rect = label_rect(x, baseline, anchor, width, font_px);
            let penalty = ring as f64 * 40.0 + turn as f64 * 4.0;
            out.push((
                PlacedLabel {
                    x,
                    baseline,
                    anchor,
                    rect,
                },
                penalty,
            ));
        }
    }
    out
}

/// Candidates at given spots: (anchor x, baseline, anchor, preference penalty).
pub(crate) fn candidates_at(
    spots: &[(f64, f64, Anchor, f64)],
    text: &str,
    font_px: f64,
    bold: bool,
) -> Vec<(PlacedLabel, f64)> {
    let width = text_width(text, font_px, bold);
    spots
        .iter()
        .map(|&(x, baseline, anchor, penalty)| {
            (
                PlacedLabel {
                    x,
                    baseline,
                    anchor,
                    rect: label_rect(x, baseline, anchor, width, font_px),
                },
                penalty,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABEL_PX: f64 = 14.0;

    #[test]
    fn placer_never_overlaps_labels() {
        let bounds = Rect {
            x0: 0.0,
            y0: 0.0,
            x1: 800.0,
            y1: 600.0,
        };
        let mut placer = LabelPlacer::new(bounds);
        let mut placed = Vec::new();
        // Ten labels on the same dot: the worst case (identical ops share a position).
        for _ in 0..10 {
            let candidates = candidates_around(400.0, 300.0, 8.0, 150.0, LABEL_PX);
            if let Some(label) = placer.place(&candidates, Some((400.0, 300.0)), 0.5) {
                placed.push(label.rect);
            }
        }
        assert_eq!(placed.len(), 10);
        for (i, a) in placed.iter().enumerate() {
            assert!(a.inside(&bounds));
            for b in &placed[i + 1..] {
                assert_eq!(a.overlap_area(b), 0.0, "{a:?} overlaps {b:?}");
            }
        }
    }

    #[test]
    fn segments_cross_only_rectangles_they_pass_through() {
        let rect = Rect {
            x0: 10.0,
            y0: 10.0,
            x1: 20.0,
            y1: 20.0,
        };
        let through = Segment {
            x0: 0.0,
            y0: 0.0,
            x1: 30.0,
            y1: 30.0,
        };
        let beside = Segment {
            x0: 0.0,
            y0: 25.0,
            x1: 30.0,
            y1: 25.0,
        };
        let short = Segment {
            x0: 0.0,
            y0: 0.0,
            x1: 5.0,
            y1: 5.0,
        };
        assert!(through.crosses(&rect));
        assert!(!beside.crosses(&rect));
        assert!(!short.crosses(&rect));
    }
}
