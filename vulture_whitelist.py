"""Names vulture takes for unused (tests/test_dead_code.py) that must stay: parameters a framework passes by
name, or a signature that must match the one it stands in for. Make the list again with
`vulture exporter prometheus grafana scripts deploy tests --min-confidence 61 --make-whitelist`."""

from vulture.whitelist_utils import Whitelist

_ = Whitelist()
_.control  # transformers' TrainerCallback hooks take `control` by keyword (torch/adapters/hf.py)
_.batch_idx  # Lightning's on_train_batch_* signature (torch/adapters/lightning.py, tests/torch/adapters/)
_.client_address  # socketserver.BaseServer.handle_error's signature (tests/bench/bench_fleet.py)
_.forward_only  # verl's worker method signature (tests/integrations/test_verl.py)
_.closure  # torch.optim.Optimizer.step's signature (tests/torch/adapters/test_hf_accumulation.py)
_.interprocess  # torch.cuda.Event's signature (tests/torch/cuda_standin.py)
_.src  # torch.distributed.broadcast's signature, which the rendered wrapper mirrors (tests/torch/render_wrapper.py)
_.group_src  # the same
