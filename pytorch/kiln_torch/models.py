"""The models, built from their one description: kiln-contract' models/ (a file per model),
written into contract.schema.json's `models` entry. Each is the network kiln-core builds from
the same description, layer for layer and parameter for parameter in the same order, so a new
model needs nothing here. Their FLOPs are Rust's, walked from the same description."""

import torch.nn as nn
import torch.nn.functional as F

import contract


class Fn(nn.Module):
    """A layer without parameters."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Residual(nn.Module):
    """main(x) + shortcut(x); an empty shortcut is the identity."""

    def __init__(self, main, shortcut):
        super().__init__()
        self.main = nn.Sequential(*main)
        self.shortcut = nn.Sequential(*shortcut)

    def forward(self, x):
        identity = self.shortcut(x)  # first, as torchvision's BasicBlock and kiln-core
        return self.main(x) + identity


PURE = {
    "relu": F.relu,
    "global_max_pool": lambda x: F.adaptive_max_pool2d(x, 1).flatten(1),
    "global_avg_pool": lambda x: F.adaptive_avg_pool2d(x, 1).flatten(1),
}


def layer(op, init="default"):
    """The PyTorch module of one op of a description (explain times them alone too)."""
    kind = op["op"]
    if kind == "conv2d":
        m = nn.Conv2d(op["in_channels"], op["out_channels"], op["kernel"], stride=op["stride"],
                      padding=op["padding"], bias=op["bias"])
        if init == "kaiming_fan_out":
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        return m
    if kind == "max_pool2d":
        return nn.MaxPool2d(op["kernel"], stride=op["stride"], padding=op["padding"])
    if kind == "batch_norm":
        return nn.BatchNorm2d(op["channels"])
    if kind == "linear":
        return nn.Linear(op["in_features"], op["out_features"])
    if kind == "channel_dropout":
        return nn.Dropout2d(op["per_mille"] / 1000.0)
    if kind in PURE:
        return Fn(PURE[kind])
    raise ValueError("no layer for op %r" % kind)


# Burn's names of the parameters PyTorch calls otherwise.
BURN_NAMES = {nn.BatchNorm2d: {"weight": "gamma", "bias": "beta"}}


class Net(nn.Sequential):
    """The model called `name`, with `names`: (name, parameter, transposed) for every
    parameter in Burn's order, named as kiln-core names them (`layer1.0.conv1.weight`); a
    linear layer's weight is stored [in, out] there, transposed."""

    def __init__(self, name):
        described = models()[name]
        named = []
        super().__init__(*[build(l, named) for l in described["layers"]])
        self.names = named


def build(described, named):
    kind = described["kind"]
    if kind == "flatten":
        return Fn(lambda x: x.flatten(1))
    if kind == "residual":
        main = [build(l, named) for l in described["main"]]
        shortcut = [build(l, named) for l in described["shortcut"]]
        return Residual(main, shortcut)
    m = layer(described["op"], described["init"])
    rename = BURN_NAMES.get(type(m), {})
    for leaf, p in m.named_parameters():
        name = "%s.%s" % (described["name"], rename.get(leaf, leaf))
        named.append((name, p, isinstance(m, nn.Linear) and leaf == "weight"))
    return m


def models():
    """Every model's description by name: its input (channels, height, width), classes and
    layers."""
    return contract.document()["models"]


def input_shape(name):
    return tuple(models()[name]["input"])
