"""The bare PyTorch training loop trainbench is judged against: no harness, no MLflow, no Hydra.

    python benchmarks/bare_pytorch_loop.py --model resnet50 --batch-size 256 --precision fp32
    python benchmarks/bare_pytorch_loop.py --model distilbert --batch-size 64 --precision tf32   # AdamW, seq 128

Synthetic data resident on the GPU, SGD, warm-up steps, then N steps timed as one block with one
synchronization at each end (the cheapest possible measurement). Prints images/s. Run it in the same
session as the harness (`python src/run.py task=benchmark ...`) and compare samples_per_s.
"""

from __future__ import annotations

import argparse
import time

import torch
import torchvision


def _distilbert() -> torch.nn.Module:
    import transformers

    return transformers.DistilBertForSequenceClassification(transformers.DistilBertConfig(num_labels=2))


def _bert_large() -> torch.nn.Module:
    import transformers

    config = transformers.BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                     intermediate_size=4096, num_labels=2)
    return transformers.BertForSequenceClassification(config)


TRANSFORMERS = {"distilbert": _distilbert, "bert_large": _bert_large}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    tf32 = args.precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    if args.model in TRANSFORMERS:  # sequence classification, 128 tokens, AdamW (as in the device README)
        model = TRANSFORMERS[args.model]().to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(1000, 30522, (args.batch_size, 128), device=device)
        y = torch.randint(0, 2, (args.batch_size,), device=device)

        def forward() -> torch.Tensor:
            return model(input_ids=x).logits
    else:
        model = getattr(torchvision.models, args.model)(weights=None, num_classes=1000).to(device)
        memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        model = model.to(memory_format=memory_format)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
        x = x.contiguous(memory_format=memory_format)
        y = torch.randint(0, 1000, (args.batch_size,), device=device)

        def forward() -> torch.Tensor:
            return model(x)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = torch.nn.functional.cross_entropy(forward(), y)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"bare {args.model} bs{args.batch_size} {args.precision}"
          f"{' channels_last' if args.channels_last else ''}: "
          f"{args.batch_size * args.steps / elapsed:.1f} samples/s ({torch.cuda.get_device_name()}, torch {torch.__version__})")


if __name__ == "__main__":
    main()
