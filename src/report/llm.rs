//! The LLM phase block of the table report: time to first token or per output token, tokens/s,
//! the bound that sets them, the bytes that stream per step and the memory the configuration
//! holds against the device's capacity.

use std::fmt::Write;

use super::units::{fmt_bytes, fmt_seconds};
use crate::analysis::llm::{LlmSummary, Phase};
use crate::analysis::Analysis;

/// The block's lines (empty when the analysis is not an LLM one).
pub fn summary_lines(analysis: &Analysis) -> String {
    let Some(llm) = &analysis.llm else {
        return String::new();
    };
    let mut out = String::new();
    let kind = if llm.expected_s.is_some() {
        "expected"
    } else {
        "bound"
    };
    let phase = match llm.phase {
        Some(Phase::Prefill) => format!(
            "prefill          {} new tokens x batch {}: time to first token {} ({kind}), {:.0} tokens/s",
            llm.new_tokens,
            llm.batch,
            fmt_seconds(llm.time_to_first_token_s.unwrap_or(llm.latency_s)),
            llm.tokens_per_s
        ),
        Some(Phase::Decode) => format!(
            "decode           batch {}, 1 new token after {} cached: {} per output token ({kind}), {:.1} tokens/s",
            llm.batch,
            llm.context_tokens.saturating_sub(llm.new_tokens),
            fmt_seconds(llm.time_per_output_token_s.unwrap_or(llm.latency_s)),
            llm.tokens_per_s
        ),
        None => format!(
            "step             batch {}, {} new tokens, {} cached: {}",
            llm.batch,
            llm.new_tokens,
            llm.context_tokens,
            fmt_seconds(llm.latency_s)
        ),
    };
    let _ = writeln!(out, "  {phase}");
    let _ = writeln!(
        out,
        "  set by           {} ({:.0}% of the time); weights {} + KV {} read, {} written per step; \
         (weights + KV) / DRAM = {}",
        llm.set_by.name(),
        llm.set_by_share * 100.0,
        fmt_bytes(llm.weight_bytes_read as f64),
        fmt_bytes(llm.kv_bytes_read as f64),
        fmt_bytes(llm.kv_bytes_written as f64),
        fmt_seconds(llm.stream_floor_s)
    );
    let _ = writeln!(
        out,
        "  bound made of    {} streaming weights and KV + {} launch overhead ({} ops) + {} the rest \
         (activations, compute beyond streaming)",
        fmt_seconds(llm.stream_floor_s),
        fmt_seconds(llm.launch_overhead_s),
        llm.running_ops,
        fmt_seconds(llm.other_s)
    );
    let _ = writeln!(
        out,
        "  storage          weights {}, activations {}, KV {}; dot products at {}",
        llm.weights.name(),
        llm.activations.name(),
        llm.kv.name(),
        llm.compute.name()
    );
    let _ = writeln!(out, "  memory           {}", memory_line(llm));
    for convention in &llm.conventions {
        let _ = writeln!(out, "  convention       {convention}");
    }
    if !llm.batch_sweep.is_empty() {
        let points: Vec<String> = llm
            .batch_sweep
            .iter()
            .map(|p| {
                format!(
                    "{}: {:.0} tok/s ({})",
                    p.batch,
                    p.tokens_per_s,
                    p.set_by.name()
                )
            })
            .collect();
        let _ = writeln!(out, "  by batch         {}", points.join(", "));
    }
    out
}

/// The batch sweep as short HTML lines (a card's width holds three figures per batch).
pub fn html_sweep(analysis: &Analysis) -> String {
    let Some(llm) = &analysis.llm else {
        return String::new();
    };
    llm.batch_sweep
        .iter()
        .map(|p| {
            let fits = if p.fits == Some(false) {
                ", does not fit"
            } else {
                ""
            };
            format!(
                "<br>batch {}: {:.0} tokens/s, {} per step, {}{fits}",
                p.batch,
                p.tokens_per_s,
                fmt_seconds(p.step_s),
                p.set_by.name()
            )
        })
        .collect()
}

fn memory_line(llm: &LlmSummary) -> String {
    let m = &llm.memory;
    let parts = format!(
        "weights {} + KV cache {} + activations {} = {}",
        fmt_bytes(m.weights_bytes as f64),
        fmt_bytes(m.kv_cache_bytes as f64),
        fmt_bytes(m.activation_peak_bytes as f64),
        fmt_bytes(m.total_bytes as f64)
    );
    match (m.capacity_bytes, m.fits, m.max_batch) {
        (Some(capacity), Some(true), Some(max_batch)) => format!(
            "{parts} of {}: fits; the largest batch that fits at this context is {max_batch}",
            fmt_bytes(capacity as f64)
        ),
        (Some(capacity), Some(false), max_batch) => {
            let advice = match max_batch {
                Some(b) if b > 0 => format!("a batch of at most {b} fits at this context"),
                _ if m.weights_bytes > capacity => {
                    "the weights alone do not fit: use a narrower --weights storage or a larger device".into()
                }
                _ => "the weights fit, but not one sequence's cache and activations at this context: a shorter context, a narrower --kv storage or a larger device".into(),
            };
            format!(
                "{parts}: DOES NOT FIT in {} ({advice})",
                fmt_bytes(capacity as f64)
            )
        }
        _ => format!("{parts} (the device states no memory capacity)"),
    }
}

/// Summary cards of the HTML report (label, value, detail): the phase's time and the memory.
/// Every string is made of numbers and fixed words (nothing from the model).
pub fn html_cards(analysis: &Analysis) -> Vec<(String, String, String)> {
    let Some(llm) = &analysis.llm else {
        return Vec::new();
    };
    let kind = if llm.expected_s.is_some() {
        "expected"
    } else {
        "roofline bound"
    };
    let (label, detail) = match llm.phase {
        Some(Phase::Prefill) => (
            "Time to first token",
            format!(
                "{kind} · {} new tokens × batch {} · {:.0} tokens/s",
                llm.new_tokens, llm.batch, llm.tokens_per_s
            ),
        ),
        _ => (
            "Time per output token",
            format!(
                "{kind} · batch {}, 1 new token after {} cached · {:.1} tokens/s",
                llm.batch,
                llm.context_tokens.saturating_sub(llm.new_tokens),
                llm.tokens_per_s
            ),
        ),
    };
    let time = llm.expected_s.unwrap_or(llm.latency_s);
    let step = (
        label.to_string(),
        fmt_seconds(time),
        format!(
            "{detail} · set by {} ({:.0}%) · (weights + KV) / DRAM {} + launches {} ({} ops) · \
             weights {}, activations {}, KV {}",
            llm.set_by.name(),
            llm.set_by_share * 100.0,
            fmt_seconds(llm.stream_floor_s),
            fmt_seconds(llm.launch_overhead_s),
            llm.running_ops,
            llm.weights.name(),
            llm.activations.name(),
            llm.kv.name()
        ),
    );
    let memory = (
        "Memory".to_string(),
        fmt_bytes(llm.memory.total_bytes as f64),
        memory_line(llm),
    );
    let mut cards = vec![step, memory];
    if let Some(best) = llm
        .batch_sweep
        .iter()
        .filter(|p| p.fits != Some(false))
        .max_by(|a, b| a.tokens_per_s.total_cmp(&b.tokens_per_s))
    {
        cards.push((
            "Tokens/s by batch".to_string(),
            format!("{:.0}", best.tokens_per_s),
            format!("the most, at batch {}:{}", best.batch, html_sweep(analysis)),
        ));
    }
    cards
}
