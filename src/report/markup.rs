//! Small helpers shared by the SVG and HTML renderers: escaping of model-provided text, text
//! width estimates for layout (no font files are read, so the estimate is a table of typical
//! sans-serif advance widths) and compact tick labels.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Escapes text for XML/HTML element content and double- or single-quoted attribute values.
/// Node names, op types and file paths come from the model file and may contain any character.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // XML 1.0 forbids most control characters even as references; drop them so the
            // chart always parses. DEL and the C1 range are allowed but discouraged, and a
            // terminal showing the SVG would act on them: dropped too.
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

/// Model-provided text made safe for a terminal: control characters (C0, DEL, C1, newlines
/// and tabs included) and the bidirectional-text overrides are replaced by a visible escape
/// (`\u{1b}`, `\n`), so a hostile node name can neither send escape sequences to the terminal
/// nor forge or reorder lines. Text without such characters is returned as is.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    escape_for_terminal(text, false)
}

/// [`terminal_safe`] over a whole rendered block: the same, except that newlines are kept.
pub fn terminal_safe_lines(text: &str) -> Cow<'_, str> {
    escape_for_terminal(text, true)
}

/// Bidirectional controls (embeddings, overrides, isolates, marks): not `is_control`, but they
/// reorder what the terminal shows ("Trojan Source").
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape_for_terminal(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    let unsafe_char =
        |c: char| (c.is_control() && !(keep_newlines && c == '\n')) || is_bidi_control(c);
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !unsafe_char(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => {
                let _ = write!(out, "{}", c.escape_unicode());
            }
        }
    }
    Cow::Owned(out)
}

/// Approximate advance width of `text` in pixels at `font_px`, for Arial-like sans-serif fonts
/// (Liberation Sans, Helvetica, Arial). Errs on the wide side so boxes built from it contain the
/// real text in the common fonts.
pub fn text_width(text: &str, font_px: f64, bold: bool) -> f64 {
    let ems: f64 = text
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | '\'' | '|' | '!' | '.' | ',' | ':' | ';' => 0.24,
            'f' | 't' | 'r' | 'I' | ' ' | '/' | '\\' | '(' | ')' | '[' | ']' | '-' => 0.34,
            'm' | 'w' | 'M' | 'W' | '%' | '@' | '×' => 0.86,
            c if c.is_ascii_digit() => 0.56,
            c if c.is_ascii_lowercase() => 0.54,
            c if c.is_ascii_uppercase() => 0.68,
            '_' | '#' | '$' | '?' | '+' | '=' | '<' | '>' | '~' => 0.58,
            '·' => 0.3,
            _ => 0.7,
        })
        .sum();
    let weight = if bold { 1.08 } else { 1.0 };
    ems * font_px * weight * 1.06
}

/// Shortens `text` to at most `max_chars` characters, keeping both ends (node names differ in
/// their tails: `/layer4/layer4.2/conv3/Conv`).
pub fn shorten_middle(text: &str, max_chars: usize) -> String {
    let count = text.chars().count();
    if count <= max_chars || max_chars < 5 {
        return text.to_string();
    }
    let keep = max_chars - 1;
    let head = keep / 2;
    let tail = keep - head;
    let mut out: String = text.chars().take(head).collect();
    out.push('…');
    out.extend(text.chars().skip(count - tail));
    out
}

/// Tick label for a value on a log axis: `0.01`, `1`, `100`, `1k`, `10G`, `2.5T`.
pub fn tick_label(value: f64) -> String {
    if !value.is_finite() || value <= 0.0 {
        return String::new();
    }
    let (scaled, prefix) = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(factor, _)| value >= *factor * 0.9999)
        .map(|(factor, prefix)| (value / factor, prefix))
        .unwrap_or((value, ""));
    let mut out = String::new();
    if scaled >= 1.0 && (scaled - scaled.round()).abs() < 1e-9 {
        let _ = write!(out, "{}", scaled.round() as i64);
    } else {
        // Trim trailing zeros of the shortest decimal form that still says the value.
        let text = format!("{scaled:.6}");
        let trimmed = text.trim_end_matches('0').trim_end_matches('.');
        out.push_str(trimmed);
    }
    out.push_str(prefix);
    out
}

/// A number with three significant digits and an SI prefix, for labels: `21.8`, `13.4 T`.
pub fn si3(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_string();
    }
    let (scaled, prefix) = [
        (1e15, " P"),
        (1e12, " T"),
        (1e9, " G"),
        (1e6, " M"),
        (1e3, " k"),
    ]
    .into_iter()
    .find(|(factor, _)| value.abs() >= *factor)
    .map(|(factor, prefix)| (value / factor, prefix))
    .unwrap_or((value, ""));
    let digits = if scaled.abs() >= 100.0 {
        0
    } else if scaled.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{scaled:.digits$}{prefix}")
}

/// A rate with three significant digits and the prefix glued to the unit: `13.4 TFLOP/s`.
pub fn si_unit(value: f64, unit: &str) -> String {
    let text = si3(value);
    match text.split_once(' ') {
        Some((number, prefix)) => format!("{number} {prefix}{unit}"),
        None => format!("{text} {unit}"),
    }
}

/// A share as a percentage with up to two significant decimals: `1%`, `0.25%`, `12.5%`.
pub fn percent(share: f64) -> String {
    // `+ 0.0` turns a negative zero into a positive one.
    let value = (share * 100.0).max(0.0) + 0.0;
    let text = if value >= 10.0 {
        format!("{value:.1}")
    } else if value >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    };
    let trimmed = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{trimmed}%")
}

/// Fits `text` into `max_width` pixels by shortening its middle.
pub fn fit_width(text: &str, font_px: f64, bold: bool, max_width: f64) -> String {
    let mut chars = text.chars().count();
    let mut fitted = text.to_string();
    while chars > 5 && text_width(&fitted, font_px, bold) > max_width {
        chars -= 1;
        fitted = shorten_middle(text, chars);
    }
    fitted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"a<b>&"c"'d'"#),
            "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;"
        );
        assert_eq!(escape("x\u{1}y"), "xy");
        assert_eq!(escape("a\u{1b}[31m\u{7f}\u{9b}b\tc"), "a[31mb\tc");
    }

    #[test]
    fn terminal_text_has_no_control_characters() {
        assert!(matches!(terminal_safe("conv1/Conv_0"), Cow::Borrowed(_)));
        assert_eq!(terminal_safe("a\u{1b}[31mb\u{7}"), "a\\u{1b}[31mb\\u{7}");
        assert_eq!(terminal_safe("x\ny\tz\r"), "x\\ny\\tz\\r");
        assert_eq!(
            terminal_safe("del\u{7f} csi\u{9b}"),
            "del\\u{7f} csi\\u{9b}"
        );
        assert_eq!(terminal_safe("abc\u{202e}fed"), "abc\\u{202e}fed");
        // Printable Unicode stays as it is.
        assert_eq!(terminal_safe("état→×…"), "état→×…");
        assert_eq!(terminal_safe_lines("a\u{1b}b\nc\n"), "a\\u{1b}b\nc\n");
        for hostile in ["\u{1b}]0;title\u{7}", "\u{8d}\u{85}", "\u{0}\u{1f}"] {
            let safe = terminal_safe(hostile);
            assert!(!safe.chars().any(char::is_control), "{safe:?}");
        }
    }

    #[test]
    fn tick_labels_use_prefixes() {
        assert_eq!(tick_label(0.01), "0.01");
        assert_eq!(tick_label(1.0), "1");
        assert_eq!(tick_label(1000.0), "1k");
        assert_eq!(tick_label(1e10), "10G");
        assert_eq!(tick_label(1e14), "100T");
        assert_eq!(tick_label(2.5e12), "2.5T");
    }

    #[test]
    fn shortening_keeps_both_ends() {
        assert_eq!(shorten_middle("abcdefghij", 7), "abc…hij");
        assert_eq!(shorten_middle("short", 7), "short");
    }

    #[test]
    fn percentages() {
        assert_eq!(percent(0.01), "1%");
        assert_eq!(percent(0.0025), "0.25%");
        assert_eq!(percent(-1e-18), "0%");
        assert_eq!(percent(0.125), "12.5%");
        assert_eq!(si_unit(13.4e12, "FLOP/s"), "13.4 TFLOP/s");
        assert_eq!(si_unit(21.75, "FLOP/B"), "21.8 FLOP/B");
    }

    #[test]
    fn three_significant_digits() {
        assert_eq!(si3(21.753), "21.8");
        assert_eq!(si3(13.4e12), "13.4 T");
        assert_eq!(si3(616e9), "616 G");
    }
}
