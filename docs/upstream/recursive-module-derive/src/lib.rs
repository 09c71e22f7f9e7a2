use burn::module::Module;
use burn::nn::Linear;

#[derive(Module, Debug)]
pub enum Layer {
    Linear(Linear),
    Block(Block),
}

#[derive(Module, Debug)]
pub struct Block {
    pub layers: Vec<Layer>,
}
