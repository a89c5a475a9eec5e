-- CreateTable
CREATE TABLE "ChatPrompt" (
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "text" TEXT NOT NULL,
    "updatedBy" TEXT,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "ChatPrompt_pkey" PRIMARY KEY ("platform","account","chatId")
);
