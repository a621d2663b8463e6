"""The one table of error signatures found in experiment logs, each with a one-line fix.

Every row is data: a name, a regular expression (applied to one line at a time, after ANSI colour
codes are removed), a severity, a hint and needles. ``severity="error"`` rows wake ``wait_experiment``;
``"warning"`` rows are only counted. ``example`` is a realistic line the pattern must match (the tests
check it) and ``source`` says where such a line comes from. ``references/error-signatures.md`` embeds
``render_table()`` verbatim (a test keeps the two in sync); regenerate it with
``python -m skill_server.experiments.signatures``.

Needles make the scan fast enough for every byte of a fast log (``hosts.agent.scanner``): ASCII strings
at least one of which, in any case, is in every line the pattern matches. Only lines holding a
needle reach the pattern, so needles must be necessary (a test derives what each pattern requires and
checks them) and selective: text that healthy runs print on every line ("inf" of
``perf/mfu/actor_infer``, "loss") would send every step line through the pattern. The run monitor on each
host gets the rows it needs from ``monitor_rows()`` at launch; titles and hints stay here.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from skill_server.hosts.agent.findings import RAY_PREFIX

#: Leading space, and the "| " that Python's exception groups put before each line of a sub-exception: lines
#: that tools print indented (a pip or uv build's output, six spaces in) are matched wherever they start.
INDENT = r"[ \t]*(?:\|[ \t]+)*"

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import MonitorConfig, MonitorPolicy, SignatureRow


@dataclass(frozen=True)
class Signature:
    name: str
    title: str
    pattern: str
    severity: str  # "error" | "warning"
    hint: str
    example: str
    source: str
    flags: int = re.MULTILINE
    #: ASCII strings, at least one of which (in any case) is in every line the pattern matches.
    needles: tuple[str, ...] = ()
    #: A failure that a relaunch from the last checkpoint may get past (a collective timeout, a lost peer):
    #: the one kind a ``resume`` policy relaunches after.
    transient: bool = False

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern, self.flags)



SIGNATURES: tuple[Signature, ...] = (
    Signature(
        name="cuda_oom",
        title="CUDA out of memory",
        pattern=r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError",
        severity="error",
        hint="Training ran out of GPU memory: lower actor_rollout_ref.actor.ppo_max_token_len_per_gpu (tokens per "
        "GPU in one actor micro-batch) or the response lengths, raise ulysses/tensor parallelism, or lower "
        "ajet.rollout.gpu_memory_utilization to leave the actor room.",
        example="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.3 GiB total)",
        source="PyTorch",
        needles=("out of memory", "Error"),
    ),
    Signature(
        name="vllm_wake_oom",
        title="vLLM wake-up OOM (cumem_allocator)",
        pattern=r"cumem_allocator(?:\.cpp)?",
        severity="error",
        hint="vLLM could not re-map its memory after a weight sync: lower ajet.rollout.gpu_memory_utilization "
        "(for example 0.8 -> 0.6) and restart.",
        example="RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:163",
        source="vLLM sleep/wake-up",
        needles=("cumem_allocator",),
    ),
    Signature(
        name="vllm_kv_cache_too_small",
        title="vLLM's KV cache cannot hold one max_model_len sequence",
        pattern=r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache"
        r"|max seq len \(\d+\).*estimated maximum model length is \d+",
        severity="error",
        hint="vLLM has less KV cache than one sequence of max_model_len needs: lower ajet.rollout.max_model_len to "
        "at most the number vLLM reports (keeping max_prompt_length + max_response_length within it), or raise "
        "ajet.rollout.gpu_memory_utilization or tensor_model_parallel_size; status computes the numbers.",
        example="ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
        "stored in KV cache (16832). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine.",
        source="vLLM engine start-up",
        needles=("max seq len",),
    ),
    Signature(
        name="nccl_error",
        title="NCCL error or collective timeout",
        pattern=r"NCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclRemoteError"
        r"|Watchdog caught collective operation timeout|NCCL (?:communicator|operation).*[Tt]imed? ?out",
        severity="error",
        hint="A collective failed or timed out: first look for another rank's earlier error; then check that all "
        "GPUs/nodes see each other (NCCL_SOCKET_IFNAME, firewall) and rerun with NCCL_DEBUG=INFO.",
        example="[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE) ran "
        "for 600000 milliseconds before timing out.",
        source="torch.distributed / NCCL",
        needles=("NCCL", "Watchdog caught collective operation timeout"),
        transient=True,
    ),
    Signature(
        name="ray_start_failure",
        title="Ray failed to start",
        pattern=r"Failed to (?:start|connect to) (?:the )?(?:Ray|GCS)|RaySystemError|Could not (?:start|connect to) Ray"
        r"|ray\.exceptions\.(?:RaySystemError|GetTimeoutError)|Failed to get the system config from raylet",
        severity="error",
        hint="Ray could not start or join: clear a stale cluster with `ray stop --force` (or launch with "
        "--autokill), free ports 6379/8265, and check /tmp has space.",
        example="RuntimeError: Failed to start the Ray head node: port 6379 is already in use",
        source="Ray",
        needles=("Failed to ", "Could not ", "Error"),
    ),
    Signature(
        name="host_oom_killed",
        title="Killed (host out of memory)",
        pattern=r"^\s*Killed\s*$|line \d+:\s+\d+ Killed\b|Out of memory: Killed process|\boom-kill(?:er)?\b",
        severity="error",
        hint="The kernel OOM killer ended a process (host RAM, not GPU): lower max_env_worker, "
        "num_fastapi_process or dataloader workers, or add RAM; `dmesg | tail` shows the victim.",
        example="bash: line 1: 48213 Killed                  python -m ajet.launcher --conf exp.yaml",
        source="shell / kernel",
        needles=("Kill",),
    ),
    Signature(
        name="nan_loss",
        title="NaN or inf loss",
        pattern=r"\b(?:[\w/@.-]*loss[\w/@.-]*|[\w/]*grad_norm): ?[-+]?(?:nan|inf)\b",
        severity="error",
        hint="A loss or gradient norm became NaN/inf: lower the learning rate, keep gradient clipping on, check "
        "rewards for NaN, and resume from the last good checkpoint.",
        example="(TaskRunner pid=4821) step:7 - actor/pg_loss:nan - actor/kl_loss:nan - actor/grad_norm:inf",
        source="verl console metrics",
        flags=re.MULTILINE | re.IGNORECASE,
        needles=("nan", ":inf", ": inf", "-inf", "+inf"),
    ),
    Signature(
        name="python_exception",
        title="Python traceback (uncaught exception)",
        # at any indentation: pip and uv indent a build's output by six spaces, Python's exception groups by "| "
        pattern=r"^" + INDENT + RAY_PREFIX + r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::.*)?$",
        severity="error",
        hint="A Python exception ended (part of) the run: read the traceback just above this line in the log "
        "and fix the code or config it names.",
        example="(TaskRunner pid=4821) ValueError: train_batch_size must be positive",
        source="Python",
        needles=("Error", "Exception"),
    ),
    Signature(
        name="rollout_thread_exception",
        title="Rollout worker thread crashed",
        pattern=r"One of the rollout threads has encountered an exception|encounter exception in env_worker_loop",
        severity="error",
        hint="An env worker loop raised: the traceback after this line names the workflow code; fix it and restart.",
        example="One of the rollout threads has encountered an exception.",
        source="AgentJet trainer rollout",
        needles=("exception",),
    ),
    Signature(
        name="swarm_server_unreachable",
        title="Swarm server unreachable",
        pattern=r"Unable to connect to swarm server|Error getting engine status in poll loop|ENGINE\.CANNOT_CONNECT",
        severity="warning",
        hint="The client cannot reach the swarm server: start it (`ajet-swarm start --swarm-port 10086`), fix "
        "AJET_SWARM_URL or the SSH port forward; start clients only after the server answers (wait_for_url).",
        example="Unable to connect to swarm server.",
        source="AgentJet swarm client",
        needles=("to connect to swarm", "CANNOT_CONNECT", "Error"),
    ),
    Signature(
        name="engine_offline",
        title="Engine went OFFLINE while a client waited",
        pattern=r"Engine status is OFFLINE while waiting",
        severity="error",
        hint="The training engine died during boot or training: read the swarm server's log for its first error.",
        example="SwarmServerOfflineError: Engine status is OFFLINE while waiting for ENGINE.ROLLING",
        source="AgentJet swarm client",
        needles=("OFFLINE while waiting",),
    ),
    Signature(
        name="episode_expired",
        title="Expired episodes (discard_episode_timeout)",
        pattern=r"has expired \(expired .*seconds ago\)|larger `?discard_episode_timeout`?",
        severity="warning",
        hint="Episodes outlived discard_episode_timeout and were dropped: raise it, or make episodes shorter "
        "(LLM calls are also limited by the ~300 s relay budget).",
        example="Episode 3f2a has expired (expired 42.0 seconds ago). Please use a larger `discard_episode_timeout`",
        source="AgentJet swarm client",
        needles=("has expired (expired ", "discard_episode_timeout"),
    ),
    Signature(
        name="resumed_from_checkpoint",
        title="Resumed from an existing checkpoint",
        pattern=r"Load from checkpoint folder: \S*global_step_\d+",
        severity="warning",
        hint="verl continued from a checkpoint it found (trainer.resume_mode auto: the newest global_step_N under "
        "checkpoint_base_dir/project_name/experiment_name): expected for a resumed attempt; for a new experiment "
        "give it its own experiment_name (or trainer.resume_mode: disable), or it trains on from another run.",
        example="(TaskRunner pid=4821) Load from checkpoint folder: /data/ckpt/math/grpo_q7b/global_step_40",
        source="verl trainer (_load_checkpoint)",
        needles=("Load from checkpoint folder",),
    ),
    Signature(
        name="batch_not_divisible",
        title="real_train_batch_size not divisible",
        pattern=r"real_train_batch_size \(.*\) must be divisible by",
        severity="error",
        hint="train_batch_size x num_repeat must be a multiple of n_gpus_per_node x nnodes; change one of them.",
        example="AssertionError: real_train_batch_size (132) must be divisible by minimal possible batch size (8)",
        source="AgentJet trainer _validate_config",
        needles=("must be divisible by",),
    ),
    Signature(
        name="illegal_token_length",
        title="illegal token length",
        pattern=r"illegal token length",
        severity="error",
        hint="max_prompt_length + max_response_length exceeds max_model_len: raise max_model_len or shorten one.",
        example="AssertionError: illegal token length",
        source="AgentJetJob",
        needles=("illegal token length",),
    ),
    Signature(
        name="gpu_memory_check_failed",
        title="GPU memory check failed",
        pattern=r"GPU memory check failed",
        severity="error",
        hint="Another process holds GPU memory: free the GPUs (nvidia-smi, `ray stop --force`) or launch with "
        "--autokill; --skip-check-avail-gpu only if you know the memory is yours.",
        example="GPU memory check failed: all GPUs must have >= 95% free memory",
        source="AgentJet launcher",
        needles=("GPU memory check failed",),
    ),
    Signature(
        name="swanlab_api_key_missing",
        title="SWANLAB_API_KEY missing",
        pattern=r"SWANLAB_API_KEY is not set",
        severity="error",
        hint="The logger is swanlab: pass SWANLAB_API_KEY in launch_experiment's env, or set "
        "ajet.trainer_common.logger to tensorboard.",
        example="SWANLAB_API_KEY is not set in the environment.",
        source="AgentJet launch environment check",
        needles=("SWANLAB_API_KEY is not set",),
    ),
    Signature(
        name="config_conflict",
        title="AgentJet/verl configuration conflict",
        pattern=r"configuration conflict between AgentJet and Verl",
        severity="error",
        hint="A hand-set verl key disagrees with the ajet.* key it is derived from: set the value through ajet.* only.",
        example="We found a configuration conflict between AgentJet and Verl!",
        source="AgentJet config preparation",
        needles=("configuration conflict between AgentJet and Verl",),
    ),
    Signature(
        name="backbone_env_mismatch",
        title="Python environment does not match the backbone",
        pattern=r"Python environment does not match current backbone",
        severity="error",
        hint="The launcher's environment check rejected the installed verl: AgentJet c68c154f accepts verl "
        "0.5.0.post/0.5.0.dev/0.7.0.post/0.7.1/0.8.0.dev, releases before it only the first three (newer verl needs "
        "a newer AgentJet); pass the venv interpreter as `python` and run `pip install -e .[verl]` (or "
        "`.[trinity]`) in the AgentJet checkout there.",
        example="ImportError: Python environment does not match current backbone 'verl'. Please `cd "
        "/path/to/project/AgentJet` and run `(uv) pip install -e .[verl]` to install the correct environment.",
        source="AgentJet launcher environment check (ajet/utils/launch_utils.py)",
        needles=("Python environment does not match",),
    ),
    Signature(
        name="tracker_tokenize_failed",
        title="A failing context tracker (its rollout log is dumped)",
        pattern=r"Error during tracker\.(?:group_)?tokenize\(\)",
        severity="error",
        hint="An episode's context tracker could not be turned into training samples (traceback follows; often a "
        "malformed tool call or an over-long context); its rollout log was still written under BEST_LOGGER_PATH "
        "(<experiment_dir>/<date>/<host>/): read that episode there, fix the workflow, restart.",
        example="2026-05-26 17:07:12.482 | ERROR    | ajet.task_rollout.native_parallel_worker:"
        "trajectories_to_samples:621 - Error during tracker.group_tokenize()",
        source="AgentJet trainer rollout (native_parallel_worker)",
        needles=("Error",),
    ),
    Signature(
        name="flash_attn_missing",
        title="FlashAttention 2 not installed",
        pattern=r"FlashAttention2 has been toggled on, but it cannot be used|No module named '?flash_attn",
        severity="error",
        hint="The model asks for flash_attention_2 but flash-attn is not installed in the training env: install it "
        "last, matching its torch (install_agentjet does: the prebuilt wheel for the env's torch, CUDA, C++ ABI and "
        "Python, else `pip install flash-attn --no-deps --no-build-isolation`), as AgentJet's install guides say.",
        example="ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
        "the package flash_attn seems to be not installed. Please refer to the documentation of "
        "https://huggingface.co/docs/transformers/perf_infer_gpu_one#flashattention-2 to install Flash Attention 2.",
        source="transformers / verl",
        needles=("flash",),
    ),
    Signature(
        name="cudart_not_found",
        title="CUDA runtime library not found (JIT kernel build)",
        pattern=r"cannot find -lcudart|libcudart\.so[.\d]*: cannot open shared object file",
        severity="error",
        hint="A JIT-compiled kernel (flashinfer, triton, a torch extension) could not link the CUDA runtime: set "
        "CUDA_HOME to a full toolkit matching torch.version.cuda and add its lib64 to LIBRARY_PATH and "
        "LD_LIBRARY_PATH (pip's nvidia/cu* wheels need a lib64 -> lib link and an unversioned libcudart.so).",
        example="/usr/bin/ld: cannot find -lcudart: No such file or directory",
        source="GNU ld / dynamic loader",
        needles=("cudart",),
    ),
    Signature(
        name="cuda_version_mismatch",
        title="CUDA driver, runtime or compiler mismatch",
        pattern=r"CUDA driver version is insufficient for CUDA runtime version|The NVIDIA driver on your system is "
        r"too old|CUDA compiler and CUDA toolkit headers are incompatible|forward compatibility was attempted on non "
        r"supported HW",
        severity="error",
        hint="The GPU driver, the CUDA runtime torch/vLLM were built for and nvcc disagree: compare `nvidia-smi` "
        "(driver's CUDA), `python -c 'import torch; print(torch.version.cuda)'` and `nvcc --version`, then install "
        "wheels built for the driver's CUDA or update the driver.",
        example="RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your "
        "GPU driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx",
        source="PyTorch / CUDA runtime",
        needles=("driver", "compatib"),
    ),
    # --- installing an environment (pip, uv, git, flash-attn's build): install_agentjet's log, or any run's
    Signature(
        name="flash_attn_build_failed",
        title="flash-attn wheel build failed",
        pattern=r"Failed (?:building wheel for|to build) `?flash[-_]attn"
        r"|Failed to build installable wheels for some pyproject\.toml based projects.*flash[-_]attn",
        severity="error",
        hint="flash-attn's source build failed; its cause is in the lines above (CUDA_HOME, nvcc, RAM, the compiler): "
        "prefer the prebuilt wheel whose tag matches the env's flash-attn, CUDA major, torch major.minor, C++ ABI and "
        "Python (install_agentjet picks it), else fix the cause and rebuild with --no-build-isolation and MAX_JOBS "
        "bounded by RAM.",
        example="  ERROR: Failed building wheel for flash-attn",
        source="pip / uv building flash-attn",
        needles=("flash",),
    ),
    Signature(
        name="flash_attn_source_fallback",
        title="No prebuilt flash-attn wheel: building from source",
        pattern=r"Precompiled wheel not found\. Building from source",
        severity="warning",
        hint="flash-attn's setup could not download a prebuilt wheel (GitHub unreachable, or none for this torch, "
        "CUDA, C++ ABI and Python) and compiles instead, for 30 minutes to hours: give it a wheel that matches "
        "(install_agentjet's flash_attn_wheels takes a mirror or a folder), or let it build with MAX_JOBS bounded by "
        "RAM.",
        example="      Precompiled wheel not found. Building from source...",
        source="flash-attn setup.py",
        needles=("Precompiled wheel not found",),
    ),
    Signature(
        name="cuda_home_not_set",
        title="CUDA_HOME is not set (extension build)",
        pattern=r"CUDA_HOME environment variable is not set",
        severity="error",
        hint="A CUDA extension (flash-attn) is being compiled and torch found no CUDA toolkit: set CUDA_HOME to the "
        "toolkit whose nvcc matches torch.version.cuda (preflight lists them), or install the prebuilt wheel instead.",
        example="      OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
        source="torch.utils.cpp_extension",
        needles=("CUDA_HOME",),
    ),
    Signature(
        name="nvcc_missing",
        title="nvcc not found",
        pattern=r"\bnvcc: (?:command )?not found|No such file or directory: '[^'\n]*nvcc'",
        severity="error",
        hint="The CUDA compiler is missing where the build runs: install the CUDA toolkit matching torch.version.cuda "
        "(root: printed as an instruction, never run by this skill) and point CUDA_HOME at it, or use the prebuilt "
        "flash-attn wheel.",
        example="      FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda/bin/nvcc'",
        source="torch.utils.cpp_extension / shell",
        needles=("nvcc",),
    ),
    Signature(
        name="cuda_home_mismatch",
        title="CUDA_HOME's CUDA is not torch's",
        pattern=r"The detected CUDA version \([\d.]+\) mismatches the version that was used to compile PyTorch",
        severity="error",
        hint="The toolkit at CUDA_HOME is another CUDA major than torch was built with: point CUDA_HOME at the toolkit "
        "matching torch.version.cuda (install_agentjet refuses a mismatch before building).",
        example="      RuntimeError: The detected CUDA version (11.8) mismatches the version that was used to compile "
        "PyTorch (12.4). Please make sure to use the same CUDA versions.",
        source="torch.utils.cpp_extension",
        needles=("mismatches the version",),
    ),
    Signature(
        name="torch_abi_mismatch",
        title="Undefined torch (c10) symbol: an extension built for another torch",
        pattern=r"undefined symbol: _ZNK?(?:3c10|2at|5torch)",
        severity="error",
        hint="A compiled extension (flash-attn, vLLM's kernels) was built against another torch version or C++ ABI "
        "(torch._C._GLIBCXX_USE_CXX11_ABI): reinstall it for this torch, the prebuilt flash-attn wheel whose tag "
        "names this torch major.minor, CUDA major and cxx11abi, or a build with --no-build-isolation --no-cache-dir.",
        example="ImportError: /venv/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: "
        "undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
        source="dynamic loader importing a torch extension",
        needles=("undefined symbol",),
    ),
    Signature(
        name="pip_resolution_impossible",
        title="Package versions conflict (resolver)",
        pattern=r"ResolutionImpossible|No solution found when resolving dependencies"
        r"|these package versions have conflicting dependencies",
        severity="error",
        hint="The resolver found no set of versions that satisfies every pin (verl, vLLM, torch and Ray pin each "
        "other): install AgentJet's extra alone into a fresh env (`pip install -e .[verl]`), without other "
        "pins, and add other packages afterwards with --no-deps.",
        example="ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/",
        source="pip / uv resolver",
        needles=("ResolutionImpossible", "No solution found", "conflicting dependencies"),
    ),
    Signature(
        name="network_timeout",
        title="Network timeout or unreachable host",
        pattern=r"ReadTimeoutError|ConnectTimeoutError|Read timed out|Connection timed out"
        r"|Failed to establish a new connection|Could not resolve host|Temporary failure in name resolution"
        r"|Network is unreachable",
        severity="warning",
        hint="A download could not reach its server (the package index, GitHub, Hugging Face): check the proxy "
        "(HTTPS_PROXY) and use a reachable mirror (install_agentjet's index_url, HF_ENDPOINT); an install run again "
        "resumes where it stopped.",
        example="fatal: unable to access 'https://github.com/modelscope/AgentJet.git/': Failed to connect to "
        "github.com port 443 after 130 ms: Connection timed out",
        source="pip, uv, git, urllib",
        needles=("timeout", "timed out", "failed to establish", "could not resolve", "name resolution",
                 "network is unreachable"),
    ),
    Signature(
        name="no_space_left",
        title="No space left on device",
        pattern=r"No space left on device|\[Errno 28\]",
        severity="error",
        hint="A file system ran full (the env, pip's or uv's cache, /tmp, checkpoints): free space or move the cache "
        "(PIP_CACHE_DIR, UV_CACHE_DIR, TMPDIR) to a larger disk, then run again (an install resumes).",
        example="      OSError: [Errno 28] No space left on device: '/tmp/pip-install-3f2a/flash-attn/build'",
        source="operating system (ENOSPC)",
        needles=("No space left", "Errno 28"),
    ),
    Signature(
        name="build_oom_killed",
        title="Compiler killed (out of memory during a build)",
        pattern=r"died due to signal 9|Killed signal terminated program",
        severity="error",
        hint="The kernel killed a compiler for memory (each flash-attn nvcc job takes up to about 8 GB): lower "
        "MAX_JOBS (install_agentjet bounds it by the RAM free), or install the prebuilt wheel.",
        example="      nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
        source="nvcc / gcc under the OOM killer",
        needles=("signal 9", "Killed signal"),
    ),
    Signature(
        name="too_many_open_files",
        title="Too many open files",
        pattern=r"Too many open files",
        severity="error",
        hint="A process hit its open-file limit (env workers, Ray and vLLM hold many sockets): raise it where the run "
        "starts, e.g. command `ulimit -n 65535 && python -m ...` (check with `ulimit -n`; the hard limit is in "
        "/etc/security/limits.conf), then restart.",
        example="OSError: [Errno 24] Too many open files: '/tmp/ajet/3f2a-interchange.sock'",
        source="operating system (EMFILE)",
        needles=("Too many open files",),
    ),
    Signature(
        name="command_not_found",
        title="Command not found (shell)",
        # bash says "line N:", dash (Debian's sh) "N:"; pip and uv indent a build's output
        pattern=r"^" + INDENT + r"(?:\S{0,200}/)?(?:bash|sh|zsh|dash)(?:: line \d{1,9}|: \d{1,9})?: \S{1,400}: "
        r"(?:command )?not found\s*$",
        severity="error",
        hint="The shell could not find the program on that host's PATH (python vs python3, a venv or conda env "
        "not activated there): launch with `python` set to the interpreter to use, or give the full path.",
        example="bash: line 1: python: command not found",
        source="the process's shell (exit code 127)",
        needles=("not found",),
    ),
    Signature(
        name="wait_for_url_gave_up",
        title="wait_for_url gave up (this tool)",
        pattern=r"\[agentjet-swarm-skill\] wait_for_url gave up",
        severity="error",
        hint="The URL this process waited for never answered: read the log of the process that should serve it.",
        example="[agentjet-swarm-skill] wait_for_url gave up after 300 s: http://127.0.0.1:10086/get_engine_status",
        source="launch_experiment process wrapper",
        needles=("wait_for_url gave up",),
    ),
)

SIGNATURES_BY_NAME: dict[str, Signature] = {s.name: s for s in SIGNATURES}


def monitor_rows() -> list[SignatureRow]:
    """The table as a host's scanner needs it (``hosts.agent.scanner.Table``): name, pattern, flags, needles, and
    the severity the run's ``error`` events carry."""
    return [{"name": s.name, "pattern": s.pattern, "flags": "i" if s.flags & re.IGNORECASE else "",
             "needles": list(s.needles), "severity": s.severity} for s in SIGNATURES]


def policy_errors(wanted: list[str] | None) -> list[str]:
    """The signature names an ``on_error`` policy acts on: ids as given, severities expanded (default: every
    signature of severity error). Raises ``ToolInputError`` naming ``policy.errors`` for an unknown one."""
    from skill_server.core.errors import ToolInputError

    names: list[str] = []
    for item in wanted if wanted is not None else ["error"]:
        if item in ("error", "warning"):
            names += [s.name for s in SIGNATURES if s.severity == item]
        elif item in SIGNATURES_BY_NAME:
            names.append(item)
        else:
            raise ToolInputError(f"{item!r} is neither a signature id (references/error-signatures.md) nor a "
                                 "severity ('error', 'warning')", field="policy.errors")
    return list(dict.fromkeys(names))


def transient_names() -> list[str]:
    """The signatures a ``resume`` policy relaunches after (``Signature.transient``)."""
    return [s.name for s in SIGNATURES if s.transient]


def monitor_config(first_step_pattern: str | None, first_step_s: int | None = None,
                   policy: MonitorPolicy | None = None) -> MonitorConfig:
    """What a launch hands each host's run monitor: the table, the run's own first-step pattern if any, its
    first-step deadline and its policies."""
    out: MonitorConfig = {"signatures": monitor_rows(), "first_step_pattern": first_step_pattern}
    if first_step_s is not None:
        out["first_step_s"] = first_step_s
    if policy:
        out["policy"] = policy
    return out


def render_table() -> str:
    """The markdown table embedded in ``references/error-signatures.md``."""
    rows = [
        "| signature | severity | matches (regex) | fix |",
        "| --- | --- | --- | --- |",
    ]
    for sig in SIGNATURES:
        pattern = sig.pattern.replace("|", "\\|")
        severity = sig.severity + (", transient" if sig.transient else "")
        rows.append(f"| `{sig.name}`: {sig.title} | {severity} | `` {pattern} `` | {sig.hint} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover - documentation helper
    sys.stdout.write(render_table())
