import torch

class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * 2
        v = y.view(-1)                  # a view that requires grad
        ctx.mark_non_differentiable(v)
        return y, v

    @staticmethod
    def backward(ctx, gy, gv):
        return gy * 2

y, v = F.apply(torch.randn(2, 3, requires_grad=True))
print("eager:    v.requires_grad =", v.requires_grad)

@torch.compile(backend="inductor")
def f(x):
    y = torch.sin(x)
    return y[0:4], y[4:8], y.detach()

x = torch.randn(8, requires_grad=True)
a, b, _ = f(x)
if a.requires_grad:                     # stock: a has no grad_fn
    (a.sum() + b.sum()).backward()
ok = x.grad is not None and torch.allclose(x.grad, x.detach().cos())
print("compiled: x.grad =", "None" if x.grad is None else "as eager" if ok else "wrong")
