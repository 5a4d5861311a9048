//! GEMM autotuning: for each GEMM shape a plan contains, time a few cache-blocking candidates
//! on this CPU and keep the fastest, as a compiler's autotuner would. Choices are cached per
//! device profile (a JSON file next to the saved probe profile), so tuning is paid once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::kernels::gemm::{self, Activation, BiasKind, Blocking, Epilogue, GemmConfig, MatRef};

/// One tuned shape.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TunedBlocking {
    pub mc: usize,
    pub kc: usize,
    pub nc: usize,
    pub nc_short: usize,
    /// Measured rate of the chosen candidate, and of the default blocking.
    pub gflops: f64,
    pub default_gflops: f64,
}

/// Tuned blockings by `isa/m/n/k/threads`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TuningCache {
    pub device: String,
    pub entries: BTreeMap<String, TunedBlocking>,
}

/// Largest problem tuned (m·n·k): bigger GEMMs are long enough that the defaults, tuned on
/// 1024³ and 2048³, already hold, and timing candidates would cost seconds.
const MAX_TUNED_VOLUME: usize = 1 << 31;

fn key(config: &GemmConfig, m: usize, n: usize, k: usize, threads: usize) -> String {
    format!("{}/{m}/{n}/{k}/{threads}", config.isa.name())
}

impl TuningCache {
    /// Where the cache of `device_id` lives (beside the probe profile).
    pub fn path_for(device_id: &str) -> Option<PathBuf> {
        let dir = crate::probe::default_profile_path()?
            .parent()?
            .to_path_buf();
        Some(dir.join(format!("gemm-tuning-{device_id}.json")))
    }

    pub fn load(path: &Path, device_id: &str) -> TuningCache {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| serde_json::from_str::<TuningCache>(&text).ok())
            .filter(|cache| cache.device == device_id)
            .unwrap_or_else(|| TuningCache {
                device: device_id.to_string(),
                entries: BTreeMap::new(),
            })
    }

    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(path, text)
    }

    /// The configuration for this shape: cached, or tuned now when `tune` is set.
    pub fn config(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        threads: usize,
        tune: bool,
    ) -> GemmConfig {
        let base = GemmConfig::default();
        if let Some(t) = self.entries.get(&key(&base, m, n, k, threads)) {
            return GemmConfig {
                blocking: Blocking {
                    mc: t.mc,
                    kc: t.kc,
                    nc: t.nc,
                    nc_short: t.nc_short,
                },
                ..base
            };
        }
        if !tune || m.saturating_mul(n).saturating_mul(k) > MAX_TUNED_VOLUME || m < 2 || n < 2 {
            return base;
        }
        let (best, tuned) = tune_shape(base, m, n, k, threads);
        self.entries.insert(key(&base, m, n, k, threads), tuned);
        best
    }
}

/// Times the candidates on random operands of this shape; best of a few calls each.
fn tune_shape(
    base: GemmConfig,
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
) -> (GemmConfig, TunedBlocking) {
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 31) % 17) as f32 * 0.01).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 7) % 13) as f32 * 0.01).collect();
    let mut c = vec![0.0f32; m * n];
    let am = MatRef {
        data: &a,
        rows: m,
        cols: k,
        row_stride: k,
        col_stride: 1,
    };
    let bm = MatRef {
        data: &b,
        rows: k,
        cols: n,
        row_stride: n,
        col_stride: 1,
    };
    let ep = Epilogue {
        bias: BiasKind::None,
        residual: None,
        activation: Activation::None,
    };
    let flops = 2.0 * (m * n * k) as f64;
    let d = base.blocking;
    let mut candidates = vec![d];
    for kc in [256, 384, 768] {
        candidates.push(Blocking { kc, ..d });
    }
    candidates.push(Blocking { mc: d.mc / 2, ..d });
    candidates.push(Blocking {
        nc_short: d.nc_short * 2,
        ..d
    });
    candidates.push(Blocking {
        nc_short: (d.nc_short / 2).max(1),
        ..d
    });
    let mut rates = Vec::with_capacity(candidates.len());
    for blocking in &candidates {
        let config = GemmConfig {
            blocking: *blocking,
            ..base
        };
        gemm::sgemm_with(&config, &am, &bm, &mut c, n, &ep, threads);
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let start = Instant::now();
            gemm::sgemm_with(&config, &am, &bm, &mut c, n, &ep, threads);
            best = best.min(start.elapsed().as_secs_f64());
        }
        rates.push(flops / best / 1e9);
    }
    let winner = (0..candidates.len())
        .max_by(|&x, &y| rates[x].total_cmp(&rates[y]))
        .unwrap_or(0);
    let chosen = candidates[winner];
    (
        GemmConfig {
            blocking: chosen,
            ..base
        },
        TunedBlocking {
            mc: chosen.mc,
            kc: chosen.kc,
            nc: chosen.nc,
            nc_short: chosen.nc_short,
            gflops: rates[winner],
            default_gflops: rates[0],
        },
    )
}

/// Plan options that use (and, with `tune`, extend) the saved tuning cache of `device_id`.
pub fn plan_options(threads: usize, device_id: &str, tune: bool) -> super::PlanOptions {
    let tuning = TuningCache::path_for(device_id).map(|path| TuningCache::load(&path, device_id));
    super::PlanOptions {
        threads,
        tuning: tuning.map(|c| std::sync::Arc::new(std::sync::Mutex::new(c))),
        tune,
        ..super::PlanOptions::default()
    }
}

/// Saves the cache held by `options` (after tuning new shapes).
pub fn save(options: &super::PlanOptions, device_id: &str) {
    if let (Some(cache), Some(path)) = (&options.tuning, TuningCache::path_for(device_id)) {
        if let Ok(cache) = cache.lock() {
            // A cache that cannot be written only costs re-tuning next time.
            let _ = cache.save(&path);
        }
    }
}
