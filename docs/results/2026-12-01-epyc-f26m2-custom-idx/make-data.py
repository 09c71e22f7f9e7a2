# Custom data for the docs' example: the embedded sample's 10,000 images re-split as a user's
# own IDX pair (8,000 train / 2,000 test, uncompressed), and a small PNG folder (3 classes).
import gzip, struct, zlib, os
src = "/work/main/datasets/fashion-mnist-sample/"
img = gzip.open(src + "t10k-images-idx3-ubyte.gz").read()
lab = gzip.open(src + "t10k-labels-idx1-ubyte.gz").read()
n = 10000
pixels, labels = img[16:], lab[8:]
def idx3(k, data): return struct.pack(">IIII", 0x803, k, 28, 28) + data
def idx1(k, data): return struct.pack(">II", 0x801, k) + data
# The user's split: the last 8,000 to train, the first 2,000 to test.
open("/tmp/myidx/train-images-idx3-ubyte", "wb").write(idx3(8000, pixels[2000*784:]))
open("/tmp/myidx/train-labels-idx1-ubyte", "wb").write(idx1(8000, labels[2000:]))
open("/tmp/myidx/test-images-idx3-ubyte", "wb").write(idx3(2000, pixels[:2000*784]))
open("/tmp/myidx/test-labels-idx1-ubyte", "wb").write(idx1(2000, labels[:2000]))
def png(path, w, h, gray):
    raw = b"".join(b"\x00" + gray[r*w:(r+1)*w] for r in range(h))
    def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
names = {0: "t-shirt", 1: "trouser", 7: "sneaker"}
count = {k: 0 for k in names}
for i in range(n):
    l = labels[i]
    if l in names and count[l] < 100:
        d = "/tmp/myfolder/" + names[l]
        os.makedirs(d, exist_ok=True)
        png("%s/%04d.png" % (d, i), 28, 28, pixels[i*784:(i+1)*784])
        count[l] += 1
print(count)
