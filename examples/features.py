#!/usr/bin/env python3
"""Tokens from a pretrained ViT or BERT for tokensel: per sample, the tokens that the
model's LAST attention layer reads, written as a `tokensel data` directory with
`"source": "supplied"` (`tokensel.write_data`), which `tokensel run --data DIR` and the
Python API (`data=`) read back. The paper's Section I fine-tunes only that layer's query
and key, the layers below being a fixed feature extractor (SPEC section 16): these
tokens are its input.

    python examples/features.py --model vit|bert --tiny [--classes 3] --n-train N
        --n-test M [--seed S] [--max-length L] --out DIR
    python examples/features.py --model vit --dataset mnist [--checkpoint NAME_OR_PATH]
        --n-train N --n-test M [--seed S] --out DIR

Which tensor (exactly):
- ViT is pre-LN: layer l computes h + Attn(LN_before(h)) + ... . The tokens are
  `layer.layernorm_before(hidden_states[-2])`: the input of the last layer
  (`hidden_states[-2]` of a forward pass with `output_hidden_states=True`) after that
  layer's own LayerNorm module (the model's module, not a re-implementation). Token 0 is
  [CLS], tokens 1..T-1 the patches in the model's order (T = 197 for a 224x224 image and
  16x16 patches).
- BERT is post-LN: the last layer's attention reads `hidden_states[-2]` directly (the
  previous layer's output, already LayerNorm'ed inside that layer). As the official code
  does, text is tokenised with `add_special_tokens=False`: there is no [CLS] and token 0
  is the first word piece (the official "CLS attention" reads that position).
Each run checks this on every sample it writes: the tokens through the last layer's own
query and key modules give softmax(q k^T / sqrt(d_head)) per head, compared with the
attention probabilities the model reports with `output_attentions=True` (eager attention);
the largest absolute difference is printed (python/tests/test_features.py holds it to
1e-6 from the float64 tokens read back from the directory).

BERT's length rule: tokensel has no attention mask, so padding would be attended. Each
text is tokenised (no special tokens) and truncated to L = `--max-length` word pieces; a
text with fewer than L word pieces is dropped (never padded) and counted, and the next
text of the seeded order takes its place; the model runs on exactly the L word pieces
(attention mask all ones), so the tokens are what the last layer reads for that input.
The counts of dropped texts are printed.

Samples: the training samples are the first `--n-train` usable ones of a seeded
permutation (NumPy `default_rng(seed)`) of the data set's training split, the test
samples the first `--n-test` of a permutation (`default_rng(seed + 1)`) of its test split
(SST-2: GLUE's validation split, as the official code). Labels are class indices 0..K-1
(the data set's own), written as true labels with eta = 0: no label noise is added here
(tokensel or the fine-tuning protocol injects it).

The head nu (K, d) (needed by `run --data`; the fine-tuning protocol fits its own head on
a clean block): row c is the mean token (over positions and over the training samples of
true class c; a class without a training sample takes the mean over all of them) minus
the mean of the rows, scaled so that the head values <nu_c, x_t> of the training tokens
have standard deviation 1 (examples/multiclass_real.py's head). Groups: the relevant
token is not known for real features, so every position is labelled I (the selection
tables then count positions only as I).

Note what tokensel then trains: f(X) = nu^T X^T softmax(X W p) with one p shared by all
samples (the rebuttal's tunable prompt token), not the [CLS] query W_Q x_0 of the model.

Modes:
- `--tiny`: a tiny RANDOMLY INITIALISED model built from a config (no hub, no download):
  ViT (16x16 images, 4x4 patches: T = 17, d = 32, 2 layers, 2 heads) on seeded uniform
  random pixel values; BERT (vocabulary 100, d = 32, 2 layers, 2 heads) on seeded random
  token ids of random lengths in [L/2, 2L]. Labels are seeded uniform in 0..K-1
  (`--classes`). Its features mean nothing: it exists to test the pipeline.
- `--dataset NAME`: one of the paper's eight data sets through Hugging Face `datasets`
  (needs the hub): mnist, cifar10, stl10, pneumoniamnist, breastmnist (ViT,
  `google/vit-base-patch16-224-in21k` by default, images through the checkpoint's
  `ViTImageProcessor` (transformers 4.x, as the official code's 4.51.3; under 5.x its PIL
  backend `ViTImageProcessorPil`), grey images repeated to 3 channels as the official
  code does),
  sst2, agnews, trec (BERT, `bert-base-uncased` by default). The hub ids are the official
  code's (`mnist`, `cifar10`, `tanganke/stl10`, `albertvillanova/medmnist-v2`,
  `nyu-mll/glue`, `fancyzhx/ag_news`, `trec` with its coarse labels).
Both: float32 model on the CPU in eval mode (dropout 0), `torch.manual_seed(seed)`,
tokens written as float64. Two runs with the same arguments write the same bytes.
"""

import argparse
import math
import sys
from pathlib import Path

import numpy as np

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
BATCH = 16

# name: (model, hub id, config name, input column, label column, test split, classes)
DATASETS = {
    "mnist": ("vit", "mnist", None, "image", "label", "test", 10),
    "cifar10": ("vit", "cifar10", None, "img", "label", "test", 10),
    "stl10": ("vit", "tanganke/stl10", None, "image", "label", "test", 10),
    "pneumoniamnist": ("vit", "albertvillanova/medmnist-v2", "pneumoniamnist", "image", "label", "test", 2),
    "breastmnist": ("vit", "albertvillanova/medmnist-v2", "breastmnist", "image", "label", "test", 2),
    "sst2": ("bert", "nyu-mll/glue", "sst2", "sentence", "label", "validation", 2),
    "agnews": ("bert", "fancyzhx/ag_news", None, "text", "label", "test", 4),
    "trec": ("bert", "trec", None, "text", "coarse_label", "test", 6),
}
CHECKPOINTS = {"vit": "google/vit-base-patch16-224-in21k", "bert": "bert-base-uncased"}


def last_layer(model, kind):
    """The last layer's (LayerNorm before attention or None, query, key, heads): the
    module names of transformers 4.x (`encoder.layer`, `query`) and 5.x (`layers`,
    `q_proj`)."""
    layers = model.encoder.layer if hasattr(model, "encoder") else model.layers
    last = layers[-1]
    attn = last.attention
    if kind == "vit" and hasattr(attn, "attention"):  # transformers 4.x: ViTAttention.attention
        attn = attn.attention
    if kind == "bert":
        attn = attn.self  # BertAttention.self (BertSelfAttention)
    query = attn.query if hasattr(attn, "query") else attn.q_proj
    key = attn.key if hasattr(attn, "key") else attn.k_proj
    ln = last.layernorm_before if kind == "vit" else None
    return ln, query, key, model.config.num_attention_heads


def attention_from(tokens, query, key, heads):
    """softmax(q k^T / sqrt(d_head)) per head from `tokens` (B, T, d) through the layer's
    own query and key modules: (B, heads, T, T)."""
    import torch

    b, t, d = tokens.shape
    q = query(tokens).view(b, t, heads, d // heads).transpose(1, 2)
    k = key(tokens).view(b, t, heads, d // heads).transpose(1, 2)
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // heads), dim=-1)


def last_layer_tokens(model, kind, batch):
    """(tokens (B, T, d) float32, the model's last-layer attention (B, H, T, T), the
    attention recomputed from the tokens) for one batch of model inputs."""
    import torch

    with torch.no_grad():
        out = model(**batch, output_hidden_states=True, output_attentions=True)
        ln, query, key, heads = last_layer(model, kind)
        h = out.hidden_states[-2]
        tokens = ln(h) if ln is not None else h
        return tokens, out.attentions[-1], attention_from(tokens, query, key, heads)


def tiny_model(kind, seed, max_length):
    """A randomly initialised tiny ViT or BERT (float32, eval mode, eager attention)."""
    import torch
    from transformers import BertConfig, BertModel, ViTConfig, ViTModel

    torch.manual_seed(seed)
    common = dict(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if kind == "vit":
        cfg = ViTConfig(image_size=16, patch_size=4, attn_implementation="eager", **common)
        model = ViTModel(cfg, add_pooling_layer=False)
    else:
        cfg = BertConfig(vocab_size=100, max_position_embeddings=max(64, max_length),
                         attn_implementation="eager", **common)
        model = BertModel(cfg, add_pooling_layer=False)
    return model.float().eval()


def hub_model(kind, checkpoint):
    """The pretrained ViT or BERT (no pooler), float32, eval mode, eager attention."""
    from transformers import BertModel, ViTModel

    cls = ViTModel if kind == "vit" else BertModel
    model = cls.from_pretrained(
        checkpoint, add_pooling_layer=False, attn_implementation="eager",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    return model.float().eval()


class Source:
    """Per split, the samples in the seeded order: `inputs(i)` is sample i's model input
    (a pixel array, or a list of word-piece ids: None when the text is too short),
    `labels[i]` its class."""

    def __init__(self, length, inputs, labels):
        self.length, self.inputs, self.labels = length, inputs, labels


def tiny_split(kind, seed, m, classes, max_length):
    """Seeded random inputs for a tiny model: `m` images or texts and labels."""
    rng = np.random.default_rng(seed)
    if kind == "vit":
        pixels = rng.random((m, 3, 16, 16), dtype=np.float32)
        inputs = lambda i: pixels[i]  # noqa: E731
    else:
        lengths = rng.integers(max(1, max_length // 2), 2 * max_length + 1, size=m)
        ids = [rng.integers(1, 100, size=k).tolist() for k in lengths]
        inputs = lambda i: ids[i][:max_length] if len(ids[i]) >= max_length else None  # noqa: E731
    labels = rng.integers(0, classes, size=m)
    return Source(m, inputs, labels)


def hub_split(name, split, seed, kind, checkpoint, max_length):
    """One split of a data set of the paper through Hugging Face `datasets`, in the
    order of a seeded permutation."""
    from datasets import load_dataset

    _, hub, config, column, label, _, _ = DATASETS[name]
    kwargs = {"trust_remote_code": True} if name == "trec" else {}
    ds = load_dataset(hub, config, split=split, **kwargs)
    order = np.random.default_rng(seed).permutation(len(ds))
    labels = np.asarray(ds[label])[order]
    if kind == "vit":
        try:  # transformers 5.x: the PIL backend, 4.x's ViTImageProcessor (5.x's default needs torchvision)
            from transformers import ViTImageProcessorPil as Processor
        except ImportError:  # transformers 4.x (the official code's 4.51.3)
            from transformers import ViTImageProcessor as Processor

        processor = Processor.from_pretrained(checkpoint)

        def inputs(i):
            img = np.asarray(ds[int(order[i])][column])
            if img.ndim == 2:  # grey: repeated to 3 channels (the official MNIST/MedMNIST code)
                img = np.repeat(img[:, :, None], 3, axis=2)
            return processor([img], return_tensors="pt")["pixel_values"][0].numpy()
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(checkpoint)

        def inputs(i):
            ids = tok(ds[int(order[i])][column], add_special_tokens=False, truncation=True,
                      max_length=max_length)["input_ids"]
            return ids if len(ids) >= max_length else None
    return Source(len(ds), inputs, labels)


def extract(model, kind, source, n, max_length):
    """The first `n` usable samples of `source`: tokens (n, T, d) float64, labels, the
    number of texts dropped as too short, and the largest |difference| of the attention
    check."""
    import torch

    kept, dropped, i = [], 0, 0
    while len(kept) < n:
        if i == source.length:
            sys.exit(f"only {len(kept)} of {n} samples usable ({dropped} texts shorter than "
                     f"{max_length} word pieces dropped): lower --max-length or the sample count")
        x = source.inputs(i)
        if x is None:
            dropped += 1
        else:
            kept.append((i, x))
        i += 1
    tokens, worst = [], 0.0
    for start in range(0, n, BATCH):
        rows = [x for _, x in kept[start:start + BATCH]]
        if kind == "vit":
            batch = {"pixel_values": torch.from_numpy(np.stack(rows)).float()}
        else:
            ids = torch.tensor(rows, dtype=torch.long)
            batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                     "token_type_ids": torch.zeros_like(ids)}
        t, reported, recomputed = last_layer_tokens(model, kind, batch)
        worst = max(worst, float((reported - recomputed).abs().max()))
        tokens.append(t.double().numpy())
    return np.concatenate(tokens), np.asarray(source.labels)[[i for i, _ in kept]].astype(np.int64), dropped, worst


def class_mean_head(x, y, classes):
    """(K, d): row c the mean token of class c's training samples (all samples' mean for a
    class without one) minus the rows' mean, scaled so the training head values have
    standard deviation 1."""
    mean_tok = x.mean(axis=1)
    means = np.stack([mean_tok[y == c].mean(axis=0) if np.any(y == c) else mean_tok.mean(axis=0)
                      for c in range(classes)])
    nu = means - means.mean(axis=0)
    scale = np.einsum("itd,cd->itc", x, nu).std()
    if not scale > 0:
        sys.exit("the class-mean head is zero (every class has the same mean token)")
    return nu / scale


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("vit", "bert"), required=True)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--tiny", action="store_true", help="a tiny randomly initialised model, no hub")
    mode.add_argument("--dataset", choices=sorted(DATASETS), help="one of the paper's data sets (needs the hub)")
    ap.add_argument("--checkpoint", help="hub name or local directory (default: the official code's)")
    ap.add_argument("--classes", type=int, default=3, help="K of --tiny's random labels")
    ap.add_argument("--n-train", type=int, required=True)
    ap.add_argument("--n-test", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-length", type=int, default=16, help="BERT: L word pieces per text")
    ap.add_argument("--steps", type=int, help="config.toml's steps (tokensel's default otherwise)")
    ap.add_argument("--step-size", type=float, help="config.toml's step_size (tokensel's default otherwise)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.tiny and args.checkpoint:
        ap.error("--tiny builds its model from a config: --checkpoint does not apply")
    if args.dataset and DATASETS[args.dataset][0] != args.model:
        ap.error(f"--dataset {args.dataset} is a {DATASETS[args.dataset][0]} data set")
    if args.n_train < 1 or args.n_test < 1 or args.max_length < 1 or args.seed < 0:
        ap.error("--n-train, --n-test and --max-length must be at least 1, --seed at least 0")

    import torch

    import tokensel

    torch.manual_seed(args.seed)
    kind = args.model
    if args.tiny:
        if not 2 <= args.classes <= 100:
            ap.error("--classes must lie in 2..100")
        classes = args.classes
        model = tiny_model(kind, args.seed, args.max_length)
        train = tiny_split(kind, args.seed, 4 * args.n_train + 8, classes, args.max_length)
        test = tiny_split(kind, args.seed + 1, 4 * args.n_test + 8, classes, args.max_length)
    else:
        classes = DATASETS[args.dataset][6]
        checkpoint = args.checkpoint or CHECKPOINTS[kind]
        model = hub_model(kind, checkpoint)
        train = hub_split(args.dataset, "train", args.seed, kind, checkpoint, args.max_length)
        test = hub_split(args.dataset, DATASETS[args.dataset][5], args.seed + 1, kind, checkpoint, args.max_length)

    x_train, y_train, drop_train, worst_train = extract(model, kind, train, args.n_train, args.max_length)
    x_test, y_test, drop_test, worst_test = extract(model, kind, test, args.n_test, args.max_length)
    n, t, d = x_train.shape
    arrays = {
        "X_train": np.ascontiguousarray(x_train), "y_train": y_train,
        "X_test": np.ascontiguousarray(x_test), "y_test": y_test,
        "nu": class_mean_head(x_train, y_train, classes), "groups": ["I"] * t,
    }
    overrides = {k: v for k, v in (("steps", args.steps), ("step_size", args.step_size)) if v is not None}
    cfg = tokensel.Config(
        model="multiclass", classes=classes, seed=args.seed, d=d, n_train=n, n_test=len(y_test),
        eta=0.0, layout={"tokens": t, "relevant": 0, "weak_same": 0, "weak_opposite": 0, "irrelevant": t},
        **overrides,
    )
    tokensel.write_data(args.out, cfg, data=arrays)
    what = "tiny random " + kind if args.tiny else f"{kind} {checkpoint} on {args.dataset}"
    print(f"features: {what}: T = {t} tokens, d = {d}, K = {classes}, n_train = {n}, n_test = {len(y_test)}")
    if kind == "bert":
        print(f"length rule: L = {args.max_length} word pieces; dropped {drop_train} training and "
              f"{drop_test} test texts shorter than L")
    print(f"last attention layer check: max |softmax(q k^T / sqrt(d_head)) - reported attention| = "
          f"{max(worst_train, worst_test):.3e} (float32)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
