"""The example jobs' tiny models, built from a config (no download): a GPT-2 of the `tiny` workload's
shape and the tiny Llama (`tiny-llama`). Shared by examples/hf_trainer.py and
examples/deepspeed_train.py; it imports only the model classes, not Transformers' Trainer, so a
DeepSpeed job that uses it does not also load the Trainer (and the probe's Trainer hook with it)."""


def model_of(name):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    if name == "gpt2":  # workloads/tiny.json
        return GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=128))
    # workloads/tiny-llama.json
    return LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                        max_position_embeddings=128, tie_word_embeddings=False))
