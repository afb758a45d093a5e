//! CPU time as the Redis benches read it: Redis's own (`INFO cpu`) and
//! this process's.

/// Redis's CPU seconds so far (user + system).
pub fn redis_cpu(server: &crate::support::RedisServer) -> f64 {
    let info = server.cli(&["INFO", "cpu"]);
    ["used_cpu_sys:", "used_cpu_user:"]
        .iter()
        .filter_map(|field| info.lines().find_map(|l| l.strip_prefix(field)))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

/// This process's CPU time (user + system) in seconds.
pub fn process_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<f64> = after_name
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    // utime and stime: fields 14 and 15, the 12th and 13th after the name.
    (fields.get(11).unwrap_or(&0.0) + fields.get(12).unwrap_or(&0.0)) / 100.0
}

/// Pins Redis (`redis_pid`) to core 0 and this process to core 1: the
/// client's threads would otherwise take Redis's core now and then, and
/// Redis's time with it. Whether both were pinned (taskset is there).
pub fn pin(redis_pid: u32) -> bool {
    [
        (redis_pid.to_string(), "0"),
        (std::process::id().to_string(), "1"),
    ]
    .iter()
    .all(|(pid, cpu)| {
        std::process::Command::new("taskset")
            .args(["-a", "-p", "-c", cpu, pid])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}
