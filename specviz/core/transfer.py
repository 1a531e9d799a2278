"""Copies between the host and a device that do not stall the host: small id lists to the device
from pinned memory (a plain copy from pageable memory waits for the device to finish its queue),
and several tensors back in one transfer (`to_host`: one synchronisation for all of them).

On a CPU both are plain: nothing to copy, nothing to wait for.
"""
from __future__ import annotations

from typing import Sequence

import torch


def to_device(values: Sequence[int] | Sequence[Sequence[int]], device: torch.device,
              dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Token / row ids as a tensor on `device`, copied from pinned memory without waiting for the
    device (CUDA's caching host allocator keeps the pinned buffer alive until the copy is done)."""
    if device.type != "cuda":
        return torch.tensor(values, dtype=dtype, device=device)
    return torch.tensor(values, dtype=dtype, pin_memory=True).to(device, non_blocking=True)


def host_to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device`, through pinned memory without waiting for the device."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def to_host(parts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors on the host, in one device-to-host transfer per device they live on: those
    elsewhere are flattened into one fp32 buffer (integer ids as int32 bit patterns, exact),
    copied once and cut back; those already on the host are returned as they are."""
    out: list[torch.Tensor] = list(parts)
    away: dict[torch.device, list[int]] = {}
    for i, t in enumerate(parts):
        if t.device.type != "cpu":
            away.setdefault(t.device, []).append(i)
    for idx in away.values():
        flat = [as_float_bits(parts[i]).reshape(-1) for i in idx]
        host = torch.cat(flat).cpu()                              # the one transfer
        at = 0
        for i, f in zip(idx, flat):
            piece = host[at: at + f.numel()].reshape(parts[i].shape)
            at += f.numel()
            out[i] = from_float_bits(piece, parts[i].dtype)
    return out


def as_float_bits(t: torch.Tensor) -> torch.Tensor:
    """A tensor as fp32 for the one transfer: bools as 0/1, integer ids as int32 bit patterns."""
    if t.dtype == torch.bool:
        return t.float()
    if not t.is_floating_point():
        return t.to(torch.int32).view(torch.float32)              # ids < 2**31: exact
    return t.float()


def from_float_bits(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """as_float_bits undone: the fp32 piece back in `dtype`."""
    if dtype == torch.bool:
        return t != 0
    if not dtype.is_floating_point:
        return t.view(torch.int32).to(dtype)
    return t
