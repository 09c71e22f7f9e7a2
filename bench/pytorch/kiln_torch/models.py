"""The models of kiln-core/src/models.rs, layer for layer (their FLOPs come from kiln-results'
layer sites, the one model description: xtask fills them in the record)."""

import torch.nn as nn
import torch.nn.functional as F



class MnistCnn(nn.Module):
    """Conv(1->64,k3) > MaxPool2 > Conv(64->512,k3) > MaxPool2 > Dropout2d(0.1) >
    AdaptiveMaxPool(1x1) > Flatten > Linear(512->1024) > ReLU > Linear(1024->10)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 64, 3)
        self.conv2 = nn.Conv2d(64, 512, 3)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout2d(0.1)
        self.fc1 = nn.Linear(512, 1024)
        self.fc2 = nn.Linear(1024, 10)

    def forward(self, x):
        x = self.pool(self.conv1(x))
        x = self.pool(self.conv2(x))
        x = self.dropout(x)
        x = F.adaptive_max_pool2d(x, 1).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


def conv(cin, cout, k, stride, pad):
    c = nn.Conv2d(cin, cout, k, stride=stride, padding=pad, bias=False)
    nn.init.kaiming_normal_(c.weight, mode="fan_out", nonlinearity="relu")
    return c


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = conv(inplanes, planes, 3, stride, 1)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv(planes, planes, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(conv(inplanes, planes, 1, stride, 0), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision's ResNet18 topology (BasicBlock, [2, 2, 2, 2]) with a 10-class head."""

    def __init__(self, in_channels, classes=10):
        super().__init__()
        self.conv1 = conv(in_channels, 64, 7, 2, 3)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks, inplanes = [], 64
        for planes, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            blocks += [BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes, 1)]
            inplanes = planes
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.blocks(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Mlp(nn.Module):
    """The flattened image > Linear(784->256) > ReLU > Linear(256->10)."""

    def __init__(self, pixels=784, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(pixels, 256)
        self.fc2 = nn.Linear(256, classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


MODELS = {
    "mnist-cnn": (lambda: MnistCnn(), (1, 28, 28)),
    "resnet18": (lambda: ResNet18(3), (3, 32, 32)),
    "resnet18-gray": (lambda: ResNet18(1), (1, 28, 28)),
    "mlp": (lambda: Mlp(), (1, 28, 28)),
}
