"""The machine config and the environment a PyTorchSim case runs in.

Machine config: PyTorchSim reads functional and timing mode from the TOGSim config that
TOGSIM_CONFIG names, so the route writes its own copy of the chosen config with those
keys set and points TOGSIM_CONFIG at it. Generation A reads JSON (`json.load`,
anonymousresearcher01/PyTorchSim fe04c9a PyTorchSimFrontend/extension_config.py, configs/*.json);
B, C1 and C2 read YAML (`yaml.safe_load`, WHUDYF/PyTorchSim bee6c84 and PSAL-POSTECH's
later extension_config.py, configs/*.yml). JSON is rewritten with the json module; the
YAML keys are flat top-level scalars, so that copy is made textually (no YAML library in
the worker's dependency set).

Case environment: every compiled program gets a fresh dump path and Inductor cache
directory. PyTorchSim keys a kernel workdir on its source text alone, so a shared dump
lets one case's cached binary and runtime files answer for another's (their own sweep
hit exactly this). Older generations read the paths once at import, so the matching
`extension_config` attributes are set as well as the environment variables.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

DEFAULT_CONFIGS = {
    "A": "configs/systolic_ws_128x128_c1_simple_noc_tpuv3.json",
    "B": "configs/systolic_ws_128x128_c1_simple_noc_tpuv3.yml",
    "C1": "configs/systolic_ws_128x128_c1_simple_noc_tpuv3.yml",
    "C2": "configs/systolic_ws_256x256_c1_simple_noc_tpuv6e_functional_only.yml",
}

# extension_config attributes that generations A/B read from the environment at import.
IMPORT_TIME_ATTRIBUTES = {
    "TORCHSIM_DUMP_PATH": "CONFIG_TORCHSIM_DUMP_PATH",
    "TORCHSIM_LOG_PATH": "CONFIG_TORCHSIM_LOG_PATH",
    "TORCHSIM_DUMP_LOG_PATH": "CONFIG_TORCHSIM_DUMP_LOG_PATH",
}
CONFIG_MODULES = ("PyTorchSimFrontend.extension_config", "PyTorchSimFrontend.config")

CONFIG_FORMATS = {"A": "json", "B": "yaml", "C1": "yaml", "C2": "yaml"}
SUFFIXES = {"json": (".json",), "yaml": (".yml", ".yaml")}
# PyTorchSim's per-buffer check (Simulator/functional_verify.py, C1's
# PyTorchSimFrontend/extension_functional_verify.py): a config key, and tolerances and a
# trace switch read from the environment once, at import.
VERIFY_KEY = "pytorchsim_functional_verify_per_kernel"
VERIFY_MODES = ("trace", "stop", "off")


class ConfigError(ValueError):
    """A machine config that cannot be used (missing file, unreadable)."""


def base_config_path(torchsim_dir: str, generation: str, choice: str | None) -> str:
    """The config to start from: `choice` (absolute or relative to TORCHSIM_DIR),
    else TOGSIM_CONFIG from the environment, else the generation's default. Its format
    must be the one the generation reads."""
    path = choice or os.environ.get("TOGSIM_CONFIG") or DEFAULT_CONFIGS[generation]
    if not os.path.isabs(path):
        path = os.path.join(torchsim_dir, path)
    wanted = CONFIG_FORMATS[generation]
    if not os.path.isfile(path):
        raise ConfigError(f"machine config {path!r} does not exist; pass the route option "
                          f"config=PATH or set TOGSIM_CONFIG to a {wanted.upper()} config under "
                          f"{torchsim_dir}/configs")
    if not path.endswith(SUFFIXES[wanted]):
        raise ConfigError(f"machine config {path!r} is not {wanted.upper()}, and PyTorchSim generation "
                          f"{generation} reads only {wanted.upper()} configs; pass config= (or TOGSIM_CONFIG) "
                          f"naming a {'/'.join(SUFFIXES[wanted])} file, e.g. {DEFAULT_CONFIGS[generation]}")
    return path


def config_format(generation: str) -> str:
    return CONFIG_FORMATS[generation]


def overlay_yaml(text: str, overrides: dict) -> str:
    """`text` with the top-level scalar keys in `overrides` replaced (or appended)."""
    keys = "|".join(re.escape(k) for k in overrides)
    kept = [line for line in text.splitlines() if not re.match(rf"^({keys})\s*:", line)]
    added = [f"{key}: {value}" for key, value in overrides.items()]
    return "\n".join(kept + ["# set by torchsim-diff"] + added) + "\n"


def read_top_level(text: str, key: str):
    """The scalar value of a top-level `key` in YAML `text`, or None."""
    match = re.search(rf"^{re.escape(key)}\s*:\s*([^#\n]*)", text, re.M)
    return match.group(1).strip() if match else None


def overlay_json(text: str, overrides: dict) -> str:
    """JSON config `text` with `overrides` set (generation A's configs are flat objects)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"machine config is not valid JSON ({exc}); generation A reads it with json.load") from None
    data.update(overrides)
    return json.dumps(data, indent=2) + "\n"


OVERLAYS = {"json": overlay_json, "yaml": overlay_yaml}


def write_machine_config(base: str, dest_stem: str, *, timing: bool, generation: str,
                         verify: bool = False) -> str:
    """Copy `base` beside `dest_stem` (suffix by format) with functional mode on, timing
    mode as asked and, where `verify`, PyTorchSim's per-buffer check on. Returns the path."""
    with open(base) as f:
        text = f.read()
    overrides = {"pytorchsim_functional_mode": 1, "pytorchsim_timing_mode": int(timing)}
    if verify:
        overrides[VERIFY_KEY] = 1
    kind = CONFIG_FORMATS[generation]
    dest = dest_stem + SUFFIXES[kind][0]
    with open(dest, "w") as f:
        f.write(OVERLAYS[kind](text, overrides))
    return dest


def verify_variables(mode: str, rtol: float | None = None, atol: float | None = None) -> dict:
    """Environment of PyTorchSim's per-buffer check (read by it at import). "trace" logs
    every buffer's error and lets the run finish (our oracle judges; the first buffer
    over tolerance names the kernel), "stop" raises FunctionalVerifyMismatch at the first."""
    if mode not in VERIFY_MODES:
        raise ConfigError(f"verify={mode!r}: expected one of {', '.join(VERIFY_MODES)}")
    if mode == "off":
        return {}
    found = {"TORCHSIM_FUNCTIONAL_VERIFY_RTOL": str(rtol if rtol is not None else 1e-4),
             "TORCHSIM_FUNCTIONAL_VERIFY_ATOL": str(atol if atol is not None else 1e-4)}
    if mode == "trace":
        found["TORCHSIM_FUNCTIONAL_VERIFY_TRACE"] = "1"
    return found


def spike_jobs(workers: int, cpus: int | None = None) -> int:
    """Spike processes per launch when `workers` workers share the machine. PyTorchSim's own
    default is min(8, CPUs/2) per launch (spike_run._jobs), which oversubscribes as soon as
    several workers launch at once."""
    cpus = cpus or os.cpu_count() or 1
    return max(1, min(8, cpus // max(1, workers)))


@dataclasses.dataclass
class CaseEnvironment:
    """Directories of one compiled program: dump path, Inductor cache, simulator logs."""

    root: str
    torchsim_dir: str
    machine_config: str
    timing: bool

    @property
    def dump_path(self) -> str:
        return os.path.join(self.root, "dump")

    @property
    def log_path(self) -> str:
        return os.path.join(self.root, "togsim_logs")

    @property
    def inductor_cache(self) -> str:
        return os.path.join(self.dump_path, ".torchinductor")

    def variables(self) -> dict:
        """Environment variables for this program (TORCHSIM_TRITON_REPLAY off: a
        replayed Spike output is not a result the simulator produced)."""
        return {
            "TORCHSIM_DIR": self.torchsim_dir,
            "TOGSIM_CONFIG": self.machine_config,
            "TORCHSIM_DUMP_PATH": self.dump_path,
            "TORCHINDUCTOR_CACHE_DIR": self.inductor_cache,
            "TORCHSIM_LOG_PATH": self.log_path,
            "TORCHSIM_DUMP_LOG_PATH": self.log_path,
            "TORCHSIM_TIMING_MODE": str(int(self.timing)),
            "TORCHSIM_TRITON_REPLAY": "0",
        }

    def apply(self) -> None:
        """Make this program's directories current (environment and loaded modules)."""
        for folder in (self.dump_path, self.inductor_cache, self.log_path):
            os.makedirs(folder, exist_ok=True)
        variables = self.variables()
        os.environ.update(variables)
        for module_name in CONFIG_MODULES:
            module = sys.modules.get(module_name)
            if module is None:
                continue
            for env_name, attribute in IMPORT_TIME_ATTRIBUTES.items():
                if attribute in vars(module):
                    setattr(module, attribute, variables[env_name])
