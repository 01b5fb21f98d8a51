# device call 61: does the PyTorch adapter count attention on CUDA? On a CPU, torch 2.14 ran a flash kernel its
# FLOP counter has no formula for (fixed in 5e1298f). Here: the adapter's training FLOPs per sequence on the GPU
# against the analytic count (trainbench.flops, which the Keras frameworks use), full-size DistilBERT, BERT-base
# and BERT-Large at 128 tokens, and the same with 5e1298f's formulas left out.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PYTHONPATH:$PWD/src
python3 - <<'PY' 2>&1 | grep -v Warning | tee $OUT/flops.txt
from hydra import compose, initialize_config_dir
from trainbench import data as datasets, frameworks
from trainbench.config import CONF_DIR, validate
from trainbench.flops import transformer_flops_per_sample
from trainbench.frameworks.pytorch import models
import torch
print("torch", torch.__version__, torch.cuda.get_device_name())
for name in ("distilbert", "bert_base", "bert_large"):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=[f"model={name}", "data=synthetic_text", "device=gpu",
                                                     "data.num_samples=4", "data.num_val_samples=0"]))
    framework = frameworks.load(cell)
    framework.select_device(cell.device)
    data = datasets.load(cell.data, cell.seed)
    model = framework.build_model(cell.model, data)
    counted = framework.flops_per_sample(model, data)
    formulas = models.flop_formulas
    models.flop_formulas = lambda: {torch.ops.aten.convolution_backward: models.convolution_backward_flops}
    without = framework.flops_per_sample(model, data)
    models.flop_formulas = formulas
    analytic = transformer_flops_per_sample(cell.model, cell.model.seq_len, data.num_classes)
    print(f"{name}: counted {counted:,.0f}, without 5e1298f's formulas {without:,.0f}, analytic {analytic:,.0f}, "
          f"counted/analytic {counted / analytic:.6f}")
PY
