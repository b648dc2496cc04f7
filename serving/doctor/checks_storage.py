"""Preflight: the volume the workers load the weights from, and the JIT cache's."""

from __future__ import annotations

from collections.abc import Iterator

from serving.doctor import kinds
from serving.doctor.context import PreflightContext
from serving.doctor.findings import Check, Finding, fail, ok, warn
from serving.doctor.k8s import Obj, dig, gb, name, quantity

# A StorageClass does not say which access modes it offers; its provisioner does.
# File systems shared between nodes (ReadWriteMany):
RWX_PROVISIONERS = (
    "efs.csi.aws.com",
    "fsx.csi.aws.com",
    "filestore.csi.storage.gke.io",
    "lustre.csi.storage.gke.io",
    "file.csi.azure.com",
    "kubernetes.io/azure-file",
    "nfs.csi.k8s.io",
    "nfs-subdir-external-provisioner",
    "cephfs.csi.ceph.com",
    "driver.longhorn.io",
    "csi.juicefs.com",
    "csi.weka.io",
    "csi.vastdata.com",
    "spectrumscale.csi.ibm.com",
    "beegfs.csi.netapp.com",
    "csi.trident.netapp.io",
    "pxd.portworx.com",
    "exa.csi.ddn.com",
)
# Block devices attached to one node at a time (ReadWriteOnce only, for a filesystem).
RWO_PROVISIONERS = (
    "ebs.csi.aws.com",
    "kubernetes.io/aws-ebs",
    "pd.csi.storage.gke.io",
    "kubernetes.io/gce-pd",
    "disk.csi.azure.com",
    "kubernetes.io/azure-disk",
    "rancher.io/local-path",
    "kubernetes.io/no-provisioner",
    "rbd.csi.ceph.com",
    "openebs.io/local",
    "topolvm.io",
    "csi.vsphere.vmware.com",
)
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)


def rwx_support(provisioner: str) -> bool | None:
    """True: shares between nodes; False: one node only; None: cannot tell."""

    def known(names: tuple[str, ...]) -> bool:
        # exact, or prefixed like "cluster.local/nfs-subdir-…", "ocs.cephfs.csi.ceph.com"
        return any(provisioner == p or provisioner.endswith(("/" + p, "." + p)) for p in names)

    if known(RWX_PROVISIONERS):
        return True
    if known(RWO_PROVISIONERS):
        return False
    return None


def _is_default(storage_class: Obj) -> bool:
    notes = dig(storage_class, "metadata", "annotations", default={}) or {}
    return any(notes.get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS)


def _rwx_classes(classes: list[Obj]) -> list[str]:
    return [name(c) for c in classes if rwx_support(c.get("provisioner", "")) is True]


def _multi_node(ctx: PreflightContext) -> bool:
    """Do pods on different nodes mount the volume (so it must be shared)?"""
    workers = sum(group.max_pods for group in ctx.plan.worker_groups)
    return workers + 1 + (1 if ctx.plan.download else 0) > 1


def check_volume(ctx: PreflightContext) -> Finding:
    storage = ctx.plan.storage
    ns = ctx.plan.namespace
    if not storage.create:
        claim = ctx.cluster.get(kinds.PVC, storage.claim, ns)
        if claim is None:
            return fail(
                f"model.pvc.existingClaim {storage.claim} does not exist in {ns}",
                f"create it (ReadWriteMany, >= the model's size) or fix the name; "
                f"kubectl -n {ns} get pvc",
            )
        modes = dig(claim, "status", "accessModes") or dig(claim, "spec", "accessModes") or []
        phase = dig(claim, "status", "phase", default="?")
        shared = {"ReadWriteMany", "ReadOnlyMany"} & set(modes)
        if not shared and _multi_node(ctx):
            return fail(
                f"claim {storage.claim} is {', '.join(modes) or 'of unknown mode'}: the head, "
                "workers on several nodes and the download Job cannot all mount it",
                "use a ReadWriteMany claim (or ReadOnlyMany already holding the weights)",
            )
        if phase != "Bound":
            return warn(
                f"claim {storage.claim} is {phase}, not Bound",
                f"kubectl -n {ns} describe pvc {storage.claim}",
            )
        return ok(f"claim {storage.claim} is Bound, {', '.join(modes)}")
    classes = ctx.cluster.list(kinds.STORAGE_CLASS)
    wanted = storage.storage_class
    chosen: Obj | None
    if wanted:
        chosen = next((c for c in classes if name(c) == wanted), None)
        if chosen is None:
            return fail(
                f"StorageClass {wanted} (model.pvc.storageClassName) does not exist",
                "choose one of: " + (", ".join(name(c) for c in classes) or "none exist"),
            )
    else:
        defaults = [c for c in classes if _is_default(c)]
        chosen = defaults[0] if defaults else None
        if chosen is None:
            rwx = _rwx_classes(classes)
            return fail(
                "no default StorageClass, and model.pvc.storageClassName is empty: the claim "
                "would stay Pending",
                "set model.pvc.storageClassName"
                + (f" (ReadWriteMany-capable here: {', '.join(rwx)})" if rwx else ""),
            )
    provisioner = chosen.get("provisioner", "?")
    support = rwx_support(provisioner)
    modes = storage.access_modes
    which = f"StorageClass {name(chosen)}" + ("" if wanted else " (the default)")
    if "ReadWriteMany" not in modes and _multi_node(ctx):
        return fail(
            f"model.pvc.accessModes is {', '.join(modes)}: pods on several nodes cannot share it",
            "keep model.pvc.accessModes [ReadWriteMany] with a class that offers it",
        )
    if support is False:
        rwx = _rwx_classes(classes)
        return fail(
            f"{which} ({provisioner}) gives volumes one node can mount; the chart's claim asks "
            "for ReadWriteMany and would stay Pending",
            "set model.pvc.storageClassName to a shared file system class"
            + (
                f": {', '.join(rwx)}"
                if rwx
                else " (EFS, Filestore, Azure Files, CephFS, NFS, Lustre …)"
            )
            + ", or use model.pvc.existingClaim",
        )
    if support is None:
        return warn(
            f"{which} ({provisioner}): cannot tell whether it offers ReadWriteMany",
            "make sure it does (a shared file system); otherwise the claim stays Pending",
        )
    return ok(f"{which} ({provisioner}) offers ReadWriteMany")


def check_capacity(ctx: PreflightContext) -> Finding | None:
    storage = ctx.plan.storage
    need = ctx.plan.model_size
    if need is None:
        return None
    model = ctx.plan.preset.model.source
    if storage.create:
        have, what = storage.size, f"model.pvc.size {storage.size_text} ({gb(storage.size)})"
    else:
        claim = ctx.cluster.get(kinds.PVC, storage.claim, ctx.plan.namespace)
        if claim is None:
            return None  # check_volume said so
        have = quantity(dig(claim, "status", "capacity", "storage")) or quantity(
            dig(claim, "spec", "resources", "requests", "storage")
        )
        what = f"claim {storage.claim} ({gb(have)})"
    if have is None:
        return warn(f"cannot tell the size of {what}")
    if have < need:
        return fail(
            f"{what} is smaller than {model} ({gb(need)})",
            f"--set model.pvc.size={int(need * 12 / 10 / 10**9)}G or larger",
        )
    if have < need * 11 / 10:
        return warn(
            f"{what} leaves under 10% headroom over {model} ({gb(need)})",
            "downloads keep partial files; give it some room",
        )
    return ok(f"{what} holds {model} ({gb(need)})")


def check_filling(ctx: PreflightContext) -> Iterator[Finding]:
    plan = ctx.plan
    if plan.storage.create and not plan.download:
        yield warn(
            "nothing fills the new model volume: the workers will not find the weights",
            "--set model.download.enabled=true (with model.download.tokenSecret.name for a "
            "gated repo), or copy the weights into the claim before the workers start",
        )
    if plan.local_cache:
        yield warn(
            f"model.localCache copies {gb(plan.model_size)} to a hostPath on every GPU node; "
            "free node disk is not visible through the API",
            "make sure each GPU node has that much free space at model.localCache.hostPath",
        )


# What a start without kept kernels costs (the measured figures: docs/cold-start.md).
COLD_START = "at V4-Flash width a fresh node compiles for minutes before it serves"


def check_jit_cache(ctx: PreflightContext) -> Finding:
    """jitCache (serving/config/jit_cache.py): a volume that outlives the pod, and one the pods on
    several nodes can all mount."""
    if not ctx.plan.objects:
        return ok("JIT cache not checked: the chart was not rendered")
    ns = ctx.plan.namespace
    volumes = ctx.plan.workers.spec.get("volumes") or []
    volume = next((v for v in volumes if v.get("name") == "jit-cache"), None)
    if volume is None or "emptyDir" in volume:
        return warn(
            "the JIT cache is the pod's own (jitCache.type emptyDir): every new pod compiles "
            f"its kernels again ({COLD_START})",
            "set jitCache.type pvc (a ReadWriteMany claim the pods share) or hostPath",
        )
    if "hostPath" in volume:
        path = dig(volume, "hostPath", "path")
        return ok(f"JIT cache on each node's {path} (hostPath: the namespace must allow it)")
    claim = dig(volume, "persistentVolumeClaim", "claimName")
    rendered = next(
        (
            o
            for o in ctx.plan.objects
            if o.get("kind") == "PersistentVolumeClaim" and name(o) == claim
        ),
        None,
    )
    if rendered is None:  # jitCache.pvc.existingClaim
        existing = ctx.cluster.get(kinds.PVC, claim, ns)
        if existing is None:
            return fail(
                f"jitCache.pvc.existingClaim {claim} does not exist in {ns}",
                f"create it (ReadWriteMany) or fix the name; kubectl -n {ns} get pvc",
            )
        modes = dig(existing, "status", "accessModes") or dig(existing, "spec", "accessModes") or []
        if not {"ReadWriteMany"} & set(modes) and _multi_node(ctx):
            return fail(
                f"JIT cache claim {claim} is {', '.join(modes) or 'of unknown mode'}: the head "
                "and workers on several nodes cannot all mount it",
                "use a ReadWriteMany claim, or jitCache.type hostPath",
            )
        return ok(f"JIT cache on claim {claim} ({', '.join(modes)})")
    wanted = dig(rendered, "spec", "storageClassName")
    classes = ctx.cluster.list(kinds.STORAGE_CLASS)
    chosen = next((c for c in classes if name(c) == wanted), None) if wanted else None
    if chosen is None and not wanted:
        chosen = next((c for c in classes if _is_default(c)), None)
    if chosen is None:
        return fail(
            f"no StorageClass for the JIT cache claim {claim} "
            f"({wanted or 'no default class'}): it would stay Pending",
            "set jitCache.pvc.storageClassName to a ReadWriteMany class, or jitCache.type hostPath",
        )
    if rwx_support(chosen.get("provisioner", "")) is False and _multi_node(ctx):
        return fail(
            f"StorageClass {name(chosen)} gives volumes one node can mount: the JIT cache "
            f"claim {claim} asks for ReadWriteMany and would stay Pending",
            "set jitCache.pvc.storageClassName to a shared file system class, or "
            "jitCache.type hostPath",
        )
    return ok(f"JIT cache on a new claim {claim} of StorageClass {name(chosen)}")


CHECKS = [
    Check("storage.volume", "Storage", check_volume),
    Check("storage.jit-cache", "Storage", check_jit_cache),
    Check("storage.capacity", "Storage", check_capacity),
    Check("storage.filling", "Storage", check_filling),
]
