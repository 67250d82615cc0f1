"""What the score stage asks of the cluster: local Ray sized for the pools, GPU pools
requested from the autoscaler up front, one line for a worker's failure."""

from __future__ import annotations

from ray_jobs.config import ConfigError
from ray_jobs.job.errors import JobError
from scoring.errors import CtgscoreError


def check_local_gpus(pools, session) -> None:
    """A local Ray has no autoscaler: a pool asking for more GPUs than it has would wait forever."""
    if session.local:
        import ray

        gpus = ray.cluster_resources().get("GPU", 0)
        wanted = max(pool.num_gpus for pool in pools)
        if gpus < wanted:
            raise ConfigError(f"'pool.num_gpus' is {wanted:g} but this local Ray has {gpus:g} GPU(s)")


def check_pool_fits(pools, session) -> None:
    """On a local Ray (fixed size, no autoscaler), a pool whose actors take every CPU starves
    Ray Data's read tasks and hangs without an error (measured on 2 cores): refuse it."""
    if not session.local:
        return
    import ray

    cpus = ray.cluster_resources().get("CPU", 0)
    needed = sum(pool.min_size * pool.num_cpus for pool in pools)
    if cpus and needed > cpus - 0.5:
        raise ConfigError(
            f"pool.min_size x pool.num_cpus x {len(pools)} metric(s) = {needed:g} CPUs leaves less than half "
            f"of one of this local Ray's {cpus:g} CPUs for reading; Ray Data would hang. Use fractional num_cpus "
            f"(e.g. 0.25) or a smaller pool"
        )


def request_gpu_pools(pools: list) -> bool:
    """Ask the cluster autoscaler up front for every GPU actor the pools may run
    (`max_size` bundles each). Ray Data grows an actor pool only onto resources the cluster
    already has, and the autoscaler adds nodes only for pending demand, so a GPU pool on nodes
    scaled from zero otherwise stays at its first replica (ray-project/ray#59144). Without an
    autoscaler the request is a no-op."""
    bundles = [{"CPU": pool.num_cpus, "GPU": pool.num_gpus} for pool in pools if pool.num_gpus for _ in range(pool.max_size)]
    if not bundles:
        return False
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=bundles)
    except Exception:  # noqa: BLE001 - best effort: the pools still run at their own pace
        return False
    return True


def release_requests() -> None:
    """Withdraw the up-front request, so idle GPU nodes go after the idle timeout."""
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[])
    except Exception:  # noqa: BLE001 - best effort
        pass


def worker_failure(exc: BaseException) -> CtgscoreError:
    """The ctgscore error a worker raised (a storage failure, say: `worker_errors.error_from_worker`
    recovers it from Ray's wrapping), else a JobError with the last line of the worker's
    error."""
    from ray_jobs.storage import worker_errors

    found = worker_errors.error_from_worker(exc)
    if found is not None:
        return found
    text = [line for line in str(exc).splitlines() if line.strip()]
    return JobError(f"scoring failed in a worker: {text[-1] if text else type(exc).__name__}")
