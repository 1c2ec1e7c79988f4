"""The machine config and the environment a PyTorchSim case runs in.

Machine config: PyTorchSim reads functional and timing mode from the TOGSim YAML that
TOGSIM_CONFIG names, so the route writes its own copy of the chosen config with those
keys set and points TOGSIM_CONFIG at it. The keys are flat top-level scalars, so the
copy is made textually (no YAML library in the worker's dependency set).

Case environment: every compiled program gets a fresh dump path and Inductor cache
directory. PyTorchSim keys a kernel workdir on its source text alone, so a shared dump
lets one case's cached binary and runtime files answer for another's (their own sweep
hit exactly this). Older generations read the paths once at import, so the matching
`extension_config` attributes are set as well as the environment variables.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys

DEFAULT_CONFIGS = {
    "A": "configs/systolic_ws_128x128_c1_simple_noc_tpuv3.yml",
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
CONFIG_MODULES = ("PyTorchSimFrontend.extension_config", "PyTorchSimCodegen.extension_config")


class ConfigError(ValueError):
    """A machine config that cannot be used (missing file, unreadable)."""


def base_config_path(torchsim_dir: str, generation: str, choice: str | None) -> str:
    """The config to start from: `choice` (absolute or relative to TORCHSIM_DIR),
    else TOGSIM_CONFIG from the environment, else the generation's default."""
    path = choice or os.environ.get("TOGSIM_CONFIG") or DEFAULT_CONFIGS[generation]
    if not os.path.isabs(path):
        path = os.path.join(torchsim_dir, path)
    if not os.path.isfile(path):
        raise ConfigError(f"machine config {path!r} does not exist; pass the route option "
                          f"config=PATH or set TOGSIM_CONFIG to a YAML under {torchsim_dir}/configs")
    return path


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


def write_machine_config(base: str, dest: str, *, timing: bool) -> str:
    """Copy `base` to `dest` with functional mode on and timing mode as asked."""
    with open(base) as f:
        text = f.read()
    overrides = {"pytorchsim_functional_mode": 1, "pytorchsim_timing_mode": int(timing)}
    with open(dest, "w") as f:
        f.write(overlay_yaml(text, overrides))
    return dest


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
